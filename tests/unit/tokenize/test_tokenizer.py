"""Byte-level BPE: lossless on real multilingual pages, byte lengths that add up, clear load errors."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding
from tokenizers import Tokenizer, models, pre_tokenizers

from marin_pipelines.tokenize.tokenizer import (
    EOS,
    TokenizerConfig,
    load_tokenizer,
    token_byte_lengths,
    train_tokenizer,
)

HARD_STRINGS = [
    "emoji 😀👍🏽 and a family 👨‍👩‍👧‍👦 in one line",
    "中文的句子，日本語の文章、한국어 문장.",
    "  leading spaces,\ttabs,\r\nwindows newlines and trailing spaces  ",
    "combining marks: e\u0301 a\u0308 and zero width\u200bjoiner",
    f"a literal {EOS} inside a document is just text",
    "",
]


@pytest.fixture(scope="module")
def page_texts(shared_data: Path) -> list[str]:
    """Main-content text of every shared web page that has some (109 pages, many languages)."""
    texts = []
    for path in sorted((shared_data / "web-pages").glob("*.html.gz")):
        html = gzip.decompress(path.read_bytes())
        text = extract_plain_text(bytes_to_str(html, detect_encoding(html)), main_content=True)
        if text:
            texts.append(text)
    return texts


@pytest.fixture(scope="module")
def tokenizer(page_texts: list[str]) -> Tokenizer:
    """Trained on the even-numbered pages, so the odd-numbered ones are unseen text."""
    return train_tokenizer(page_texts[::2], TokenizerConfig(vocab_size=1024))


def test_trained_vocabulary(tokenizer: Tokenizer) -> None:
    assert tokenizer.get_vocab_size() == 1024
    assert tokenizer.token_to_id(EOS) == 0
    vocab = tokenizer.get_vocab()
    assert set(pre_tokenizers.ByteLevel.alphabet()) <= set(vocab)
    assert any(len(token) > 3 for token in vocab)  # merges were learned


def test_round_trip_and_byte_lengths_on_unseen_pages(tokenizer: Tokenizer, page_texts: list[str]) -> None:
    lengths = token_byte_lengths(tokenizer)
    unseen = page_texts[1::2] + HARD_STRINGS
    assert len(unseen) > 50
    for text, encoding in zip(unseen, tokenizer.encode_batch(unseen), strict=True):
        assert tokenizer.decode(encoding.ids) == text
        assert int(lengths[encoding.ids].sum()) == len(text.encode("utf-8"))


def test_eos_only_from_the_id(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(f"end{EOS}start").ids
    assert 0 not in ids
    assert tokenizer.decode(ids) == f"end{EOS}start"


def test_byte_lengths_of_tokens(tokenizer: Tokenizer) -> None:
    lengths = token_byte_lengths(tokenizer)
    assert lengths.shape == (1024,) and lengths.dtype == np.int32
    assert lengths[0] == 0  # EOS
    assert lengths[tokenizer.token_to_id("a")] == 1
    e_acute = tokenizer.encode("é").ids
    assert lengths[e_acute].sum() == 2
    assert lengths[1:].min() >= 1


def test_save_and_load(tokenizer: Tokenizer, tmp_path: Path) -> None:
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    text = f"Grüße aus Köln {EOS} 😀"
    for path in (tmp_path, tmp_path / "tokenizer.json"):
        loaded = load_tokenizer(path)
        assert loaded.encode(text).ids == tokenizer.encode(text).ids
        assert loaded.decode(loaded.encode(text).ids) == text


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="tokenizer file not found"):
        load_tokenizer(tmp_path / "missing.json")
    without_eos = train_tokenizer(["some text"] * 5, TokenizerConfig(vocab_size=300))
    data = json.loads(without_eos.to_str())
    data["added_tokens"] = []
    del data["model"]["vocab"][EOS]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="has no '<\\|endoftext\\|>' token"):
        load_tokenizer(tmp_path)


def test_byte_lengths_reject_non_byte_level_tokenizer() -> None:
    word_level = Tokenizer(models.WordLevel({"▁the": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="not byte-level"):
        token_byte_lengths(word_level)


def test_config_validation_names_the_field() -> None:
    assert TokenizerConfig().vocab_size == 4096
    with pytest.raises(ValidationError, match="vocab_size"):
        TokenizerConfig(vocab_size=100)
    with pytest.raises(ValidationError, match="min_frequency"):
        TokenizerConfig(min_frequency=0)
    with pytest.raises(ValidationError, match="vocab\n  Extra inputs are not permitted"):
        TokenizerConfig(vocab=4096)


def test_a_runs_special_tokens_are_the_defaults_unless_its_folder_records_others(tmp_path: Path) -> None:
    """A run made here has no special_tokens.json; an imported one records its own, and a tokenizer that
    lacks EOS loads with them (and is refused, naming the token, without them)."""
    from tokenizers import decoders

    from marin_pipelines.tokenize.tokenizer import (
        BOS,
        SPECIAL_TOKENS_FILE,
        SpecialTokens,
        run_special_tokens,
        save_special_tokens,
        special_token_ids,
    )

    assert run_special_tokens(tmp_path) == SpecialTokens() == SpecialTokens(bos=BOS, eos=EOS, stop=())
    save_special_tokens(tmp_path, SpecialTokens())
    assert not (tmp_path / SPECIAL_TOKENS_FILE).exists()  # the defaults need no file

    llama = Tokenizer(models.BPE())
    llama.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    llama.decoder = decoders.ByteLevel()
    llama.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    llama.add_tokens(list(pre_tokenizers.ByteLevel.alphabet()))
    llama.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="has no '<\\|endoftext\\|>' token"):
        load_tokenizer(tmp_path)

    specials = SpecialTokens(
        bos="<|begin_of_text|>", eos="<|eot_id|>", stop=("<|end_of_text|>", "<|eot_id|>")
    )
    save_special_tokens(tmp_path, specials)
    assert run_special_tokens(tmp_path) == specials
    loaded = load_tokenizer(tmp_path, run_special_tokens(tmp_path))
    ids = special_token_ids(loaded, specials)
    assert (ids.bos, ids.eos, ids.stop) == (0, 2, (2, 1))  # eos first, each stop once
    with pytest.raises(ValueError, match="has no '<\\|im_end\\|>' token"):
        special_token_ids(loaded, specials.model_copy(update={"stop": ("<|im_end|>",)}))

    (tmp_path / SPECIAL_TOKENS_FILE).write_text('{"bos": "", "eos": "</s>"}')
    with pytest.raises(ValueError, match=f"{SPECIAL_TOKENS_FILE} is not a record of special tokens"):
        run_special_tokens(tmp_path)
