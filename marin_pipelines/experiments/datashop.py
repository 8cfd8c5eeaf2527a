"""Datashop on the demo's crawl: the quality classifier learns from annotator labels, not a reference set.

The crawl-to-dedup steps are the demo's own (shared, never recomputed); the labels, the classifier, the
curated text, its tokens, a run and its evaluation are this experiment's.

The rubric asks for pages that teach Python's object model (classes, special methods, attributes).
By default the embedded SimilarityAnnotator labels the sample: it is no language model, it gives
each document the label of the example documents below that it is most similar to. To have a real
model label by the rubric instead, set ``annotator`` to a model name and point the annotator resource
at an OpenAI-compatible endpoint (see the README).
"""

from __future__ import annotations

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import evaluate, quality_and_curation, tokenizer_and_cache, train

RUBRIC = """Below is an extract from a web page. Rate how well it teaches a programmer Python's object \
model: classes and instances, attributes, special ("dunder") methods, descriptors and how the \
interpreter uses them.

0: not about Python at all (shops, news, navigation, advertising).
1: about Python, but only statements, syntax or grammar, with nothing on objects.
2: mentions objects or methods in passing.
3: explains some part of the object model.
4: explains the object model clearly, with its rules and exceptions.
5: an excellent, thorough explanation of the object model that a learner could study.

Extract:
{document}

Answer with "Score: N", where N is 0 to 5."""

# For the embedded SimilarityAnnotator: a few documents per label, written for this experiment.
EXAMPLES: dict[int, list[str]] = {
    5: [
        "Every object has an identity, a type and a value. A class defines the attributes and methods of "
        "its instances; when an attribute is looked up on an instance, the instance dictionary is searched "
        "first, then the class and its base classes in method resolution order.",
        "Special methods such as __init__, __repr__, __eq__, __getattr__ and __len__ let a class take part "
        "in the interpreter's protocols: the interpreter calls them implicitly when an instance is created, "
        "compared, printed or asked for an attribute that does not exist.",
    ],
    3: [
        "A descriptor is a class attribute whose type defines __get__, __set__ or __delete__; the methods "
        "are called when the attribute is accessed on an instance of the owner class. Properties, static "
        "methods and class methods are implemented as descriptors.",
    ],
    1: [
        "The for statement iterates over the items of a sequence; the while statement repeats a block as "
        "long as an expression is true. The import statement finds a module and binds a name in the local "
        "namespace. An assignment statement evaluates the expression list and assigns the result.",
        "The grammar of the statement is given in extended BNF: keywords, the expression list, an optional "
        "else clause, and the suite of statements that forms the body.",
    ],
    0: [
        "Our café has served coffee and cakes since 1921. Opening hours, prices and the menu are on the "
        "board by the counter; call us to reserve a table for a birthday or a meeting.",
        "Home | About | Contact | Privacy policy | Subscribe to our newsletter. We use cookies to improve "
        "your experience. Buy now with free shipping and a discount on your first order.",
    ],
}


DATASHOP = {
    "rubric": RUBRIC,
    "sample_size": 200,
    "scale": {"min": 0, "max": 5, "keep": 3},
    "annotator": "similarity",
    "examples": EXAMPLES,
}

quality = quality_and_curation(
    "datashop",
    demo.text.deduplicated_text,
    datashop=DATASHOP,
    # A few hundred labelled documents: every negative is used (the labels were paid for), and more epochs
    # at a higher rate than for reference-vs-crawl, where the classes are easy to tell apart.
    quality={"bucket": 50_000, "negatives_per_positive": 10.0, "epoch": 50, "lr": 1.0},
    curation={"top_fraction": 0.5},
)
tokens = tokenizer_and_cache(
    "datashop", quality.curated_text, tokenizer={"vocab_size": 2048}, cache={"validation_fraction": 0.1}
)
checkpoint = train("datashop/checkpoint", tokens, model=demo.MODEL, train=demo.TRAIN)

datashop = Experiment(
    "datashop",
    steps=[evaluate("datashop/eval_results", checkpoint, evals=demo.EVALS)],
    description="The demo's crawl, with the quality classifier trained on Datashop labels of a crawl sample "
    "(embedded SimilarityAnnotator by default), then tokens, a run and its evaluation.",
)
