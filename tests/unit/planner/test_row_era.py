"""The era of a published run (trainyard.planner.row_era): its year, and the defaults of the
stacks of its time that a row does not state: here, whether its pipeline sends were split
over the tensor-parallel ranks (Megatron-LM's scatter/gather, 27fc468964, 2021-01-20)."""

from __future__ import annotations

from published_rows import ROW

from trainyard.planner.compute import step_time
from trainyard.planner.row_era import legacy, p2p_split, run_year
from trainyard.planner.rows import row_inputs

PIPELINED = {**ROW, "num_gpus": "8", "tensor_parallel": "4", "pipeline_parallel": "2"}


def test_pipeline_sends_are_split_unless_the_code_predates_it() -> None:
    assert p2p_split(ROW)  # a row of no stated era: today's Megatron
    for table in ("README_2021_01", "README_2020_A100_MP"):
        assert not p2p_split({**ROW, "table_id": table})
    # SC'21's runs (April 2021) and the README's table of April 2021 split them
    assert p2p_split({**ROW, "table_id": "SC21_T1"})
    assert p2p_split({**ROW, "table_id": "README_2021_04"})
    # a run of 2020 by its source's date, and a stated cell either way
    assert not p2p_split({**ROW, "source": "a README of 2020-09-11"})
    assert not p2p_split({**ROW, "scatter_gather": "no", "source": "(2024)"})
    assert p2p_split({**ROW, "table_id": "README_2021_01", "scatter_gather": "yes"})


def test_a_row_without_the_split_is_read_and_predicted_slower() -> None:
    old = row_inputs({**PIPELINED, "table_id": "README_2021_01"})
    new = row_inputs({**PIPELINED, "table_id": "README_2021_01", "scatter_gather": "yes"})
    assert not isinstance(old, str) and not isinstance(new, str)
    assert not old[1].p2p_split and new[1].p2p_split
    assert old[1].tp == 4 and old[1].pp == 2
    slow, fast = (step_time(*inputs[:3]).iteration_s for inputs in (old, new))
    assert slow > fast


def test_the_year_and_the_legacy_defaults_moved_here_read_as_before() -> None:
    assert run_year({**ROW, "source": "Narayanan et al., arXiv:2104.04473"}) == 2021
    assert run_year({**ROW, "notes": "on 2016 GPUs"}) is None  # a count, not a year
    assert legacy({**ROW, "table_id": "SC21_T1"}) and not legacy(ROW)
    assert legacy({**ROW, "year": "2022"}) and not legacy({**ROW, "year": "2023"})
