"""The engine's released build: which compute capabilities its CUDA kernels were compiled for.

A rule can say "Marlin runs FP8 weight-only on sm70" while the wheel ``pip install vllm`` fetches carries no
sm70 kernels at all (vLLM dropped sm70 from its PyPI wheels in 0.20.0). ``[[build]]`` entries in an engine
file record, per version range, the SASS (cubin) and PTX architectures of the released package, read from
its fatbinary by ``matrices/tools/verify_cuda_build.py``; this dimension turns a GPU the build cannot run on
into ``unsupported`` whatever the weight-format rules say. Versions without a ``[[build]]`` entry and
non-NVIDIA targets are left to the rules (the dimension has nothing to say).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qcheck.matrix.versions import contains, parse_cc
from qcheck.model import Judgement, Source

if TYPE_CHECKING:
    from qcheck.matrix.deployment import Deployment
    from qcheck.matrix.schema import Build

DIMENSION = "build"


def runs_on(build: Build, cc: str) -> bool:
    """A cubin for sm_XY runs on capability X.Z with Z >= Y (same major); PTX for sm_XY is JIT-compiled for any
    capability >= X.Y."""
    want = parse_cc(cc)
    for sass in build.sass:
        have = parse_cc(sass)
        if have.major == want.major and have.minor <= want.minor:
            return True
    return any(parse_cc(ptx) <= want for ptx in build.ptx)


def build_for(builds: tuple[Build, ...] | list[Build], deployment: Deployment) -> Build | None:
    """The ``[[build]]`` entry covering the deployment's engine version, if any."""
    for build in builds:
        if build.versions is None or contains(build.versions, deployment.at):
            return build
    return None


def judge_build(deployment: Deployment) -> Judgement | None:
    """``unsupported`` when the released build has no kernels for the GPU's compute capability, else None."""
    target = deployment.target
    if target is None or target.vendor != "nvidia" or not target.cc:
        return None
    engine = deployment.request.engine
    build = build_for(engine.builds, deployment)
    if build is None or runs_on(build, target.cc):
        return None
    archs = ", ".join(f"sm{c.replace('.', '')}" for c in build.sass)
    ptx = f"; PTX {', '.join('sm' + c.replace('.', '') for c in build.ptx)}" if build.ptx else ""
    reason = (f"{engine.name} {deployment.version}'s released build has no CUDA kernels for {target.sm} "
              f"(compiled for {archs}{ptx}): {build.reason}")
    sources = [Source(ref=s.ref, version=s.version, note=s.note) for s in build.sources]
    return Judgement(DIMENSION, "unsupported", [reason], sources)
