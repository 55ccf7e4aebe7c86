"""MXFP6 (OCP microscaling FP6, E2M3/E3M2 with an E8M0 scale per 32): native F6 dtypes, or Quark's packs
re-read by its config reader (``quark`` module). Not simulated."""

from qcheck.formats.record import Format, Layout, Variant

FORMAT = Format(
    method="mxfp6",
    label="MXFP6",
    layouts=(Layout("mxfp6-packed"),),
    shows_scale_dtype=True,
    variants=(
        Variant("OCP MX FP6", {"weight_bits": 6, "weight_dtype": "fp6_e3m2", "activation_dtype": "fp6_e3m2",
                               "scale_dtype": "e8m0", "group_size": 32, "scale_granularity": "group",
                               "producer": "quark", "config_method": "quark"}),
    ),
)
