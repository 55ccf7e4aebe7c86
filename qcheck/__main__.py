from qcheck.cli import main

main()
