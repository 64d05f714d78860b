"""The method registry: everything the trainer, the sweep, the probe and the export know about a method.

Adding a method is one entry here (plus whatever new model code it needs). Seeds: 002 is Lee et al. 2021
(XPT, its baselines Scratch, Adapters and XPT-SP), 003 is Gogoulou et al. (the source vocabulary kept,
``keep_vocab``), 004 is TreLM (an ICLR 2021 submission, ``trelm``), 000 is Son et al. ("Language Chameleon":
XPT without ITLs and with a randomly initialised source); see ``../shared/seeds/README.md`` in the project's workspace.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PresetPhase:
    """One phase of a method's preset schedule, the phases ``xpt_ds.sweeps.plan`` writes for the method when the
    base config's phases are not written for it: PhaseConfig's name, trainable, start_from, merge and
    objectives, and its share of the run's total optimizer steps."""
    name: str
    share: float  # of the total steps (global steps: both branches of a graph count)
    trainable: tuple[str, ...] = ()  # empty: the trainer's preset for the phase's index (Method.presets)
    start_from: str = ""
    take: tuple[tuple[str, str], ...] = ()  # merge.take as (pattern, phase) pairs
    average: tuple[str, ...] = ()  # merge.average
    objectives: tuple[str, ...] = ()  # empty: phase_checks.phase_objectives' default

    def as_config(self) -> dict:
        """The phase's fields as a config's ``phases[i]`` entry (no schedule: steps, lr, warmup)."""
        out: dict = {"name": self.name}
        if self.trainable:
            out["trainable"] = list(self.trainable)
        if self.start_from:
            out["start_from"] = self.start_from
        if self.take or self.average:
            out["merge"] = {"take": dict(self.take), "average": list(self.average)}
        if self.objectives:
            out["objectives"] = list(self.objectives)
        return out


@dataclass(frozen=True)
class Method:
    name: str  # model.method
    display: str  # in tables and plots (002's names)
    has_itl: bool  # ITL_in / ITL_out around the encoder: C + 2 layers
    source: str  # 'pretrained': copy the source's weights; 'random': copy a randomly initialised source of the
    # same shape (000 Table 3); 'none': nothing copied, every weight starts random (Scratch)
    presets: tuple[tuple[str, ...], ...]  # @groups that train in each phase when phases[i].trainable is empty
    adapters: bool = False  # Houlsby adapters in every layer (xpt_ds.model.methods.adapters)
    lora: bool = False  # LoRA on the reused layers of a decoder source (xpt_ds.model.methods.lora), merged at export
    export: str = "stock"  # 'stock': a plain save_pretrained directory; 'adapters': + xpt_adapters.py, auto_map;
    # 'trelm': + xpt_trelm.py, auto_map, the target language row folded, the English vocabulary dropped
    vocab: str = "target"  # 'target': a new SentencePiece vocabulary with new embeddings (model.tokenizer);
    # 'source': the source's own Hugging Face tokenizer, word embeddings and LM head, all copied (003);
    # 'extend': the source's tokenizer with target pieces appended (xpt-data extend-vocab), its rows copied and
    # the new ones from model.embedding_init, the two held apart so either can be frozen (xpt_ds.model.methods.extend)
    trelm: bool = False  # TRILayer, language embeddings and the English vocabulary beside the target's (004,
    # xpt_ds.trelm.model); trains on the objectives each phase lists (config.OBJECTIVES, xpt_ds.trelm.objective)
    trilayer: bool = True  # trelm: the TRILayer between the encoder halves; without it (004 Table 7's "w/o
    # TRILayer") there is no reordering, so no CdLM, and the export is a stock model (the target row folded)
    phase1_extra: bool = True  # model.phase1_trains_position_and_head applies to the first of two presets
    extension: str = ""  # the module of the method's own model parts (tags, modules, objective), which the generic
    # model code calls through xpt_ds.model.methods.extensions without knowing the method
    graph: tuple[PresetPhase, ...] = ()  # the phase graph the method's recipe needs (start_from, merge,
    # objectives: 004 Alg. 1), which a sweep writes for it; empty: one phase per preset

    @property
    def phases(self) -> int:
        """Phases the presets cover."""
        return len(self.presets)

    @property
    def schedule(self) -> tuple[PresetPhase, ...]:
        """The phases a sweep writes for the method: its graph, else one phase per preset, equal shares, the
        trainable patterns left to the presets (so model.phase1_trains_position_and_head still applies)."""
        if self.graph:
            return self.graph
        n = len(self.presets)
        return tuple(PresetPhase("all" if n == 1 else f"phase{i + 1}", 1 / n) for i in range(n))


_TWO_PHASES = (("@new",), ("@all",))  # 002 §3.4: phase 1 trains only the new parameters, phase 2 everything
_ONE_PHASE = (("@all",),)
TRELM_PARTS = "xpt_ds.trelm.extension"  # TRILayer, English vocabulary, language embeddings, TreLM objective


def _trelm_graph(branch_objectives: tuple[str, str]) -> tuple[PresetPhase, ...]:
    """004 §3.2-3.3, Alg. 1: commonality -> two transfer branches from its end -> their merge -> language-specific,
    in A.5's proportions (20K : 20K : 20K : 80K steps); launch/configs/trelm_three_phase.yaml spells it out."""
    en_x, x_en = branch_objectives
    return (PresetPhase("common", 1 / 7, ("@all", "!@encoder"), objectives=("mlm_target", "mlm_source")),
            PresetPhase("en_x", 1 / 7, ("@all", "!@lower"), start_from="common", objectives=("mlm_target", en_x)),
            PresetPhase("x_en", 1 / 7, ("@all", "!@upper"), start_from="common", objectives=("mlm_target", x_en)),
            PresetPhase("language_specific", 4 / 7, ("@all",), take=(("@lower", "x_en"), ("@upper", "en_x")),
                        average=("en_x", "x_en"), objectives=("mlm_target",)))

METHODS: dict[str, Method] = {m.name: m for m in [
    Method("scratch", "Scratch", has_itl=True, source="none", presets=_ONE_PHASE),
    Method("adapters", "Adapters", has_itl=False, source="pretrained", presets=_ONE_PHASE, adapters=True,
           export="adapters"),
    Method("xpt_sp", "XPT-SP", has_itl=True, source="pretrained", presets=_ONE_PHASE),
    Method("xpt", "XPT", has_itl=True, source="pretrained", presets=_TWO_PHASES),
    Method("xpt_no_itl", "XPT w/o ITL", has_itl=False, source="pretrained", presets=_TWO_PHASES),
    Method("random_source", "XPT w/ random source", has_itl=True, source="random", presets=_TWO_PHASES),
    # Decoder sources only: the new vocabulary's rows and LoRA on every reused layer train; the source weights
    # never do (the parameter-efficient baseline of decoder adaptation).
    Method("lora", "LoRA", has_itl=False, source="pretrained", presets=(("@new",),), lora=True),
    # Decoder sources only: vocabulary extension (Chinese-LLaMA, EEVE, SambaLingo). Phase 1 trains the new input
    # and head rows with everything of the source frozen, bitwise; phase 2 everything. EEVE's finer schedule is a
    # phase list (launch/configs/extend_eeve.yaml).
    Method("extend", "Vocab. extension", has_itl=False, source="pretrained",
           presets=(("@new_rows", "@new_head_rows"), ("@all",)), vocab="extend", phase1_extra=False),
    Method("keep_vocab", "[lang→en][lang] (Gogoulou)", has_itl=False, source="pretrained", presets=_ONE_PHASE,
           vocab="source"),
    # presets: a config's own phases with trainable left empty train @all. graph: 004 §3.2's three phases
    # (commonality, transfer as two half-models merged, language-specific), which a sweep writes; without the
    # TRILayer the branches train English MLM instead of CdLM (004 Table 7's "w/o CdLM & w/o TRILayer").
    Method("trelm", "TreLM", has_itl=False, source="pretrained", presets=_ONE_PHASE, trelm=True,
           export="trelm", graph=_trelm_graph(("cdlm_en_x", "cdlm_x_en")), extension=TRELM_PARTS),
    Method("trelm_no_tri", "TreLM w/o CdLM & w/o TRILayer", has_itl=False, source="pretrained", presets=_ONE_PHASE,
           trelm=True, trilayer=False, export="trelm", graph=_trelm_graph(("mlm_source", "mlm_source")),
           extension=TRELM_PARTS),
]}
BASELINE = "scratch"  # what the data-efficiency ratio compares against (002 §5.1)


def method_of(config) -> Method | None:
    """The method a built or exported model's HF config (or its ``config.json`` as a dict) records
    (``xpt_method``), or None for a model this project did not build (e.g. the English source)."""
    name = config.get("xpt_method") if isinstance(config, dict) else getattr(config, "xpt_method", None)
    return METHODS.get(name or "")


def has_itl(config) -> bool:
    """Whether a built or exported model (its HF config) holds ITL_in and ITL_out (``method_of``'s method has them)."""
    method = method_of(config)
    return method is not None and method.has_itl
