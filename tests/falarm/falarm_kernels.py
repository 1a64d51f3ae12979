"""The correct kernels of tests/falarm, each with the support it declares to
hla_oracle.fuzz (README.md here: what each is and how it was derived).

KERNELS[name] = Kernel(fn, backward, support fields, framework, layout).
"""
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "examples"))

import adjoint_np  # noqa: E402

# The example's declaration (examples/test_torch_hla.py): f32 compute on bf16/f16 inputs.
EXAMPLE_PRECISION = {"bf16": "f32", "f16": "f32", "f32": "f32", "f64": "f64"}
EXAMPLE_FEATURES = ["decay", "normalize", "clamp", "scale", "gqa", "varlen", "den"]


@dataclass
class Kernel:
    fn: object
    backward: object          # a callable, or "autograd"
    support: dict             # hla_oracle.Support fields (max_n set by the caller)
    framework: str
    layout: str
    note: str = ""
    extra: dict = field(default_factory=dict)


def _example(form):
    import torch_hla

    f = {"recurrent": torch_hla.fused_recurrent_hla2, "chunk": torch_hla.chunk_hla2}[form]

    def run(q, k, v, o):  # as examples/test_torch_hla.py runs it (no state: gradient cases have none)
        return f(q, k, v, gamma=o.gamma, scale=o.scale, cu_seqlens=o.cu_seqlens, normalize=o.normalize, eps=o.eps,
                 return_den=True)[:2]
    run.__qualname__ = f"torch_hla.{f.__name__}"
    return run


def _paper(q, k, v, o):
    import paper_state_torch
    return paper_state_torch.hla2_paper_state(q, k, v, o)


def kernels():
    """name -> Kernel (imports torch lazily: the numpy kernels run without it)."""
    adj = ["decay", "normalize", "clamp", "scale", "gqa", "varlen", "den"]
    np_sup = dict(dtypes=["f64", "f32", "bf16", "f16"], precision=adjoint_np.PRECISION)
    return {
        "example_recurrent": Kernel(_example("recurrent"), "autograd",
                                    dict(variants=["hla2"], dtypes=["f64", "f32", "bf16", "f16"],
                                         features=EXAMPLE_FEATURES, precision=EXAMPLE_PRECISION),
                                    "torch", "bthd", "examples/torch_hla.py fused_recurrent_hla2, torch.autograd"),
        "example_chunk": Kernel(_example("chunk"), "autograd",
                                dict(variants=["hla2"], dtypes=["f64", "f32", "bf16", "f16"],
                                     features=EXAMPLE_FEATURES, precision=EXAMPLE_PRECISION),
                                "torch", "bthd", "examples/torch_hla.py chunk_hla2 (chunk 16), torch.autograd"),
        "paper_state": Kernel(_paper, "autograd",
                              dict(variants=["hla2"], dtypes=["f64", "f32"],
                                   features=["decay", "normalize", "clamp", "scale", "gqa", "varlen", "den", "ridge",
                                             "unmasked"],
                                   precision={"f32": "f32", "f64": "f64"}, form_class="state_difference"),
                              "torch", "bhtd", "hla2 S·C − G (SPEC §3 paper state), torch.autograd, state_difference"),
        "adjoint_la1": Kernel(adjoint_np.forward, adjoint_np.backward, dict(variants=["la1"], features=adj, **np_sup),
                              "numpy", "bhtd", "numpy streaming la1 + hand-derived adjoint"),
        "adjoint_hla2": Kernel(adjoint_np.forward, adjoint_np.backward,
                               dict(variants=["hla2"], features=adj + ["ridge", "unmasked"], **np_sup),
                               "numpy", "bhtd", "numpy streaming hla2 (F form; unmasked S·C) + hand-derived adjoint"),
        "adjoint_ahla": Kernel(adjoint_np.forward, adjoint_np.backward, dict(variants=["ahla"], features=adj, **np_sup),
                               "numpy", "bhtd", "numpy streaming ahla (Alg. 2) + hand-derived adjoint"),
    }
