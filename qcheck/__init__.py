"""qcheck: will this quantised checkpoint run on that engine and GPU, and what did quantisation cost?"""

__version__ = "0.1.0"
