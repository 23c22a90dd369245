"""Example plan with an array kernel: each record `n` repeated n times (one mapInArrow call
per partition, numpy on CPU, cupy on GPU). Used by the cluster test and by
`python -m executor gpu-check`.

    python -m executor run plans/examples/copies.py --input xs=xs.csv --output out/
"""


def copies(xp, cols):
    """Row i repeated cols["n"][i] times (the README's kernel example)."""
    from gpu_kernels.diffs import parents

    parent = parents(xp, xp.astype(cols["n"], xp.int64))
    return {"parent": parent, "n": xp.take(cols["n"], parent)}


def build(flow):
    flow.output("copies", flow.input("xs", "n BIGINT").join_function(kernel=copies,
                                                                     schema="n BIGINT"))
