"""Which quality classifier makes better training data from one crawl: fastText trained on reference
texts vs the crawl (DCLM-style), or fastText trained on Datashop labels? Both keep the same top half of
the demo's deduplicated crawl, are tokenized with the demo's tokenizer and train the same model; both
runs are measured on their own validation split and on the demo's (the same text for both)."""

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import datashop, demo
from marin_pipelines.experiments.defaults import (
    Claim,
    compare,
    evaluate,
    quality_and_curation,
    tokenizer_and_cache,
    train,
)
from marin_pipelines.scaling.seed_noise import MEASURED_SEED_NOISE

KEPT = {"top_fraction": 0.5}  # datashop's curation: the two arms keep as many documents
TRAIN = {**demo.TRAIN, "steps": 200, "warmup_steps": 20}

arms = {
    "fasttext": quality_and_curation(
        "quality_ablation/fasttext",
        demo.text.deduplicated_text,
        scores=demo.quality.quality_scores,
        curation=KEPT,
    ).curated_text,
    "datashop": datashop.quality.curated_text,
}
evaluations = {}
for label, curated in arms.items():
    tokens = tokenizer_and_cache(f"quality_ablation/{label}", curated, tokenizer=demo.tokens.tokenizer)
    run = train(f"quality_ablation/{label}/checkpoint", tokens, model=demo.MODEL, train=TRAIN)
    evaluations[label] = evaluate(
        f"quality_ablation/{label}/eval_results", run, evals=demo.EVALS, also={"demo_text": demo.tokens.cache}
    )

quality_ablation = Experiment(
    "quality_ablation",
    steps=[
        compare(
            "quality_ablation/comparison",
            evaluations,
            hypothesis="Labels from a rubric select text closer to what the model is evaluated on than "
            "reference-vs-crawl does: the Datashop arm reaches lower bits-per-byte on the lm-eval tasks' "
            "Python documentation and on the demo's validation text.",
            metrics=["marin_python_text/bits_per_byte", "bpb/demo_text"],
            claims=[Claim("datashop", "better", "fasttext")],
            noise=MEASURED_SEED_NOISE,  # no tolerance stated, no seeds run: the project's measured noise
        )
    ],
    description="One crawl, two quality classifiers (reference fastText vs Datashop labels), two curated "
    "sets, two caches, two runs, one comparison.",
)
