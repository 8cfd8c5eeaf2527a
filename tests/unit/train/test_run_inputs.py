"""A run folder's record of its inputs: written at the first start, compared by identity at every restart."""

import json

import pytest

from marin_pipelines.train.run_inputs import INPUTS_FILE, OtherInputs, check_inputs, given


def test_a_restart_is_compared_by_identity_not_by_place(tmp_path):
    out = str(tmp_path / "run")
    check_inputs(out, {"data": given("aaaa", "/caches/one")}, record=False)  # not process 0: nothing written
    assert not (tmp_path / "run" / INPUTS_FILE).exists()
    check_inputs(out, {"data": given("aaaa", "/caches/one")}, record=True)
    check_inputs(out, {"data": given("aaaa", "gs://moved/one")}, record=True)  # the same cache, moved
    assert json.loads((tmp_path / "run" / INPUTS_FILE).read_text())["data"]["from"] == "/caches/one"
    with pytest.raises(OtherInputs, match=r"data: made from /caches/one \(identity aaaa\), now given /c/two"):
        check_inputs(out, {"data": given("bbbb", "/c/two")}, record=True)
    with pytest.raises(OtherInputs, match="tokenizer: made from nothing"):
        check_inputs(out, {"data": given("aaaa", "/caches/one"), "tokenizer": given("t", "x")}, record=True)


def test_a_record_that_is_not_json_is_named(tmp_path):
    (tmp_path / INPUTS_FILE).write_text("{half")
    with pytest.raises(OtherInputs, match=f"{INPUTS_FILE} is not the JSON"):
        check_inputs(str(tmp_path), {"data": given("aaaa", "/c")}, record=True)
