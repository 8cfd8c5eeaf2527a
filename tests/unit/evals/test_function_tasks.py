"""The shipped generative tasks about standard-library functions: made from this Python's docstrings, about
modules no demo text holds, loaded and scored offline through lm-eval with the prompts, few-shot examples and
sampling settings their YAMLs declare, and read by decontamination like every shipped task."""

import json

import pytest
import yaml
from lm_eval.api.model import LM

from marin_pipelines.evals.evaluation_items import evaluation_items
from marin_pipelines.evals.lm_eval_tasks import (
    FUNCTION_TASKS,
    SHIPPED_TASKS,
    SHIPPED_TASKS_DIR,
    TaskLoader,
    run_tasks,
    task_scores,
)
from marin_pipelines.evals.python_functions import FEWSHOT, MODULES, TEST_FILE, python_version, task_files
from marin_pipelines.evals.tasks.sampled_answers import process_results, token_f1
from marin_pipelines.stages.dataset_dumps import MODULES as DUMPED_MODULES
from marin_pipelines.stdlib_material import CURATED_MODULES

TASKS = FUNCTION_TASKS
FUNCTIONS = [json.loads(line) for line in (SHIPPED_TASKS_DIR / TEST_FILE).read_text().splitlines()]


def task_config(name: str) -> dict:
    return yaml.load((SHIPPED_TASKS_DIR / f"{name}.yaml").read_text(), Loader=TaskLoader)  # noqa: S506


def test_the_shipped_files_are_this_python_s_docstrings():
    made_by = {task_config(name)["metadata"]["python"] for name in TASKS}
    assert made_by == {"3.11"}
    if python_version() not in made_by:
        pytest.skip(f"the task files hold Python {made_by.pop()}'s docstrings, this is {python_version()}")
    assert {file: (SHIPPED_TASKS_DIR / file).read_text() for file in task_files()} == task_files()
    assert len(FUNCTIONS) == 45 and not {f["name"] for f in FUNCTIONS} & set(FEWSHOT)
    assert TASKS == ("marin_python_signature", "marin_python_doc") and set(TASKS) <= set(SHIPPED_TASKS)


def test_no_demo_text_holds_the_functions_modules():
    """Neither the demo crawl's pydoc pages and chat set nor the docstring dump are about these modules."""
    asked = set(MODULES) | {alias for alias, _ in MODULES.values()}
    assert not asked & (set(CURATED_MODULES) | set(DUMPED_MODULES))


QUESTIONS = {
    "marin_python_signature": "{name}: {doc}\nSignature: {name}(",
    "marin_python_doc": "Question: What does `{name}` do?\nAnswer:",
}


class Answering(LM):
    """A stand-in model that answers each question with ``answer(task, function)``, finding the task and the
    function by the question that ends the prompt, and writes down what it was asked."""

    def __init__(self, answer):
        super().__init__()
        self.answer = answer
        self.asked: list[tuple[str, dict]] = []
        self.questions = {q.format(**f): (task, f) for f in FUNCTIONS for task, q in QUESTIONS.items()}

    def generate_until(self, requests):
        self.asked += [request.args for request in requests]
        return [self.answer(*self.questions[r.args[0].split("\n\n")[-1]]) for r in requests]

    def loglikelihood(self, requests):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError

    def chat_template(self, chat_template=False):
        return None


def evaluate(answer, tmp_path) -> tuple[dict, Answering]:
    lm = Answering(answer)
    return task_scores(run_tasks(lm, list(TASKS), [], tmp_path)), lm


def right(task: str, function: dict) -> str:
    return f"{function['params']})\n" if task == "marin_python_signature" else f" {function['doc']}"


def test_right_answers_score_one_and_wrong_ones_zero(tmp_path):
    scored, lm = evaluate(right, tmp_path / "right")
    assert scored == {
        "marin_python_signature": {"exact_match": 1.0},
        "marin_python_doc": {"f1": 1.0, "f1_best": 1.0},
    }
    wrong, _ = evaluate(lambda task, f: "zzz", tmp_path / "wrong")
    assert wrong == {
        "marin_python_signature": {"exact_match": 0.0},
        "marin_python_doc": {"f1": 0.0, "f1_best": 0.0},
    }

    # the prompts: the signature's after one example of the few-shot file; the doc's alone, sampled 4 times
    signature = [(c, k) for c, k in lm.asked if c.endswith("(")]
    doc = [(c, k) for c, k in lm.asked if c.endswith("Answer:")]
    assert len(signature) == 45 and len(doc) == 4 * 45
    examples = [f"Signature: {name}(" for name in FEWSHOT]
    assert all(c.count("\n\n") == 1 and sum(e in c for e in examples) == 1 for c, _ in signature)
    assert all(c == QUESTIONS["marin_python_doc"].format(**lm.questions[c][1]) for c, _ in doc)
    assert {json.dumps(k, sort_keys=True) for _, k in signature} == {
        json.dumps({"until": ["\n"], "max_gen_toks": 24, "do_sample": False}, sort_keys=True)
    }
    assert {json.dumps(k, sort_keys=True) for _, k in doc} == {
        json.dumps(
            {"until": ["\n", "Question:"], "max_gen_toks": 32, "do_sample": True, "temperature": 0.8}
            | {"top_p": 0.95, "seed": 1234},
            sort_keys=True,
        )
    }


def test_the_sampled_score_is_each_sample_s_word_overlap():
    assert token_f1("Return an absolute path.", "return the ABSOLUTE path") == 1.0  # case, articles, dots
    # 2 of the 4 words predicted are right, 2 of the 3 wanted are found
    assert token_f1("the absolute path of a file", "Return an absolute path.") == pytest.approx(4 / 7)
    assert token_f1("", "") == 1.0 and token_f1("", "path") == 0.0 and token_f1("a b", "c") == 0.0
    doc = {"doc": "Split a pathname."}
    assert process_results(doc, [["Split a pathname.", "Split the path", "no"]]) == {
        "f1": pytest.approx((1 + 0.5 + 0) / 3),
        "f1_best": 1.0,
    }
    assert process_results(doc, ["Split a pathname."]) == {"f1": 1.0, "f1_best": 1.0}  # one sample


def test_decontamination_reads_every_item_prompt_and_answer():
    items = [i for i in evaluation_items(list(TASKS))]
    by_task = {task: [i for i in items if i.suite == task] for task in TASKS}
    assert [len(by_task[task]) for task in TASKS] == [45, 45]
    join = "Join two or more pathname components, inserting '/' as needed."
    signature = by_task["marin_python_signature"][10]
    assert signature.prompt == f"os.path.join: {join}\nSignature: os.path.join("
    assert signature.text == f"{signature.prompt} a, *p)"  # words matter to the n-grams, not the space
    doc = by_task["marin_python_doc"][10]
    assert doc.prompt == "Question: What does `os.path.join` do?\nAnswer:"
    assert doc.text == f"{doc.prompt} {join}"
