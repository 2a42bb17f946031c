"""Property tests: more sharding (ZeRO, tp, pp, dp) never raises memory per GPU, apart from the
first stage's embedding-dropout mask, which grows with the micro-batches in flight."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import given
from hypothesis import strategies as st

from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import GB, memory_per_gpu, stage_memory
from trainyard.planner.model import Model

EPS = 1e-9


@st.composite
def cases(draw: st.DrawFn) -> tuple[Model, ParallelLayout]:
    heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8, 16) if heads % k == 0]))
    head_dim = draw(st.sampled_from([8, 16, 64, 128]))
    layers = draw(st.sampled_from([1, 2, 4, 6, 8, 12, 16]))
    model = Model(
        "p",
        layers=layers,
        hidden=heads * head_dim,
        heads=heads,
        kv_heads=kv,
        seq_len=draw(st.sampled_from([16, 256, 2048, 8192])),
        vocab=draw(st.sampled_from([64, 32000, 128256])),
        global_batch=64 * draw(st.integers(1, 4)),
        gated_mlp=draw(st.booleans()),
        tied_embeddings=draw(st.booleans()),
    )
    layout = ParallelLayout(
        tp=draw(st.sampled_from([t for t in (1, 2, 4) if kv % t == 0])),
        pp=draw(st.sampled_from([p for p in (1, 2, 4) if layers % p == 0])),
        dp=draw(st.sampled_from([1, 2, 4, 8])),
        micro_batch=draw(st.sampled_from([1, 2, 4])),
        zero=draw(st.integers(0, 3)),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        sequence_parallel=draw(st.booleans()),
        fp32_grads=draw(st.booleans()),
    )
    return model, layout


def total(model: Model, layout: ParallelLayout) -> float:
    return memory_per_gpu(model, layout).total


@given(cases())
def test_more_zero_sharding_never_increases_memory(case: tuple[Model, ParallelLayout]) -> None:
    model, layout = case
    # ZeRO 0-2; ZeRO-3 also holds two gathered layers, which a small dp may not repay.
    totals = [total(model, dataclasses.replace(layout, zero=z)) for z in range(3)]
    assert all(b <= a + EPS for a, b in itertools.pairwise(totals))


@given(cases())
def test_more_dp_never_increases_memory(case: tuple[Model, ParallelLayout]) -> None:
    model, layout = case
    more = dataclasses.replace(layout, dp=layout.dp * 2)
    assert total(model, more) <= total(model, layout) + EPS


@given(cases())
def test_more_tp_never_increases_memory(case: tuple[Model, ParallelLayout]) -> None:
    model, layout = case
    if model.kv_heads % (2 * layout.tp):
        return
    more = dataclasses.replace(layout, tp=layout.tp * 2)
    assert total(model, more) <= total(model, layout) + EPS


@given(cases())
def test_more_pp_never_increases_memory_beyond_dropout_masks(
    case: tuple[Model, ParallelLayout],
) -> None:
    model, layout = case
    if model.layers % (2 * layout.pp):
        return
    more = dataclasses.replace(layout, pp=layout.pp * 2)
    m = layout.microbatches(model)
    extra_in_flight = min(2 * layout.pp, m) - min(layout.pp, m)
    sp_div = layout.tp if layout.sequence_parallel else 1
    sbh = model.seq_len * layout.micro_batch * model.hidden
    allowance = extra_in_flight * sbh / sp_div / GB
    assert total(model, more) <= total(model, layout) + allowance + EPS
    # weights, gradients and optimizer state never grow on any stage (the busiest stage may
    # switch from the last to the first one, whose embedding states are larger)
    states = [
        max(x.weights + x.grads + x.optimizer for x in stage_memory(model, lay))
        for lay in (layout, more)
    ]
    assert states[1] <= states[0] + EPS


@given(cases())
def test_recompute_never_increases_activations(case: tuple[Model, ParallelLayout]) -> None:
    # Stage by stage (the most loaded GPU may change stage: when recompute lightens the first
    # stage, the last one, with its logits, can become the heaviest), and the most loaded
    # GPU's total.
    model, layout = case
    modes = ("none", "selective", "full")
    stages = [stage_memory(model, dataclasses.replace(layout, recompute=r)) for r in modes]
    for less, more in itertools.pairwise(stages):  # less recompute, then more
        assert [x.stage for x in less] == [x.stage for x in more]
        for a, b in zip(less, more, strict=True):
            assert a.activations + EPS >= b.activations
    totals = [memory_per_gpu(model, dataclasses.replace(layout, recompute=r)).total for r in modes]
    assert totals[0] + EPS >= totals[1] and totals[1] + EPS >= totals[2]


@given(cases())
def test_all_parts_positive(case: tuple[Model, ParallelLayout]) -> None:
    mem = memory_per_gpu(*case)
    assert min(mem.weights, mem.grads, mem.optimizer, mem.activations) > 0
