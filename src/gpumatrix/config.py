"""`ci/matrix.yaml`: GPU classes, runners and bot settings, loaded into frozen dataclasses.

The file is validated as a whole: every problem (unknown key, duplicate label, a runner naming an
unknown class, a non-positive count or timeout, ...) is collected with its line and reported at once
through `MatrixError`, so a maintainer fixes the file in one pass. Whatever the bytes, loading ends
in a `Matrix` or a `MatrixError` (`gpumatrix.yamlfile` reads the file, as it reads ci/paths.yaml: text
that is not UTF-8, unconvertible tags, nesting too deep, null or empty text fields are problems too).
The optional `suites` section declares the suites a test file may name in `register(suite=...)`
besides the built-in `pr` (the default: every pull request) and `nightly` (the scheduled run); the
optional `flaky` section how often a test of a file registered `flaky=` runs again after a failure, and
`bot.max_repeat` the most runs `/rerun-test --repeat N` may ask (docs/flaky.md).
The semantics are docs/registry.md's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import yaml

from gpumatrix import UsageError
from gpumatrix.bounds import MAX_GPUS, MAX_SHARDS
from gpumatrix.problems import ProblemsError
from gpumatrix.yamlfile import INVALID, YamlReader, compose_yaml, read_yaml_text

__all__ = [
    "ALL_SUITES",
    "BUILTIN_SUITES",
    "CPU_CLASS",
    "DEFAULT_FLAKY_RERUNS",
    "DEFAULT_SUITE",
    "DEFAULT_TEST_ROOTS",
    "DEFAULT_WORKERS_PER_GPU",
    "MAX_FLAKY_RERUNS",
    "MAX_REPEAT",
    "MAX_WORKERS_PER_GPU",
    "VENDORS",
    "MAX_SECONDS",
    "NIGHTLY_SUITE",
    "PERMISSION_LEVELS",
    "BotConfig",
    "GpuClass",
    "Matrix",
    "MatrixError",
    "Runner",
    "WorkersPerGpu",
    "load_matrix",
    "parse_matrix",
]

CPU_CLASS = "cpu"
# Where test files live unless ci/matrix.yaml says otherwise (`test_roots:`).
DEFAULT_TEST_ROOTS = ("tests",)
# Who makes a class's GPUs, which says how a device is told to be of it: NVIDIA's by compute capability,
# AMD's by gfx architecture (gfx942), Intel's by device name ("Data Center GPU Max").
VENDORS = ("nvidia", "amd", "intel")
# A file's suite says when CI runs it: `pr` on every pull request (the default), `nightly` on the
# schedule; ci/matrix.yaml may declare more. `--suite all` selects every suite, so no suite is named so.
DEFAULT_SUITE = "pr"
NIGHTLY_SUITE = "nightly"
ALL_SUITES = "all"
# The most seconds a test file may be estimated at (`register(est_time=...)`) or measured to take (a JSON
# report's durations): a week, longer than GitHub Actions lets any job run (5 days on a self-hosted
# runner). Past it a number is a mistake or a forgery, and it would overflow what plans and proposals add up.
MAX_SECONDS = 7 * 24 * 3600
BUILTIN_SUITES: Mapping[str, str] = MappingProxyType(
    {
        DEFAULT_SUITE: "every pull request and push (the default of register(suite=...))",
        NIGHTLY_SUITE: "once a day, on every runner that has nightly files",
    }
)
# A test of a file registered flaky= on the class it runs as runs again after a failure, up to this many times
# (`flaky: reruns:`); more would hide a test that fails half the time (2 reruns pass it 7 times in 8).
DEFAULT_FLAKY_RERUNS = 2
MAX_FLAKY_RERUNS = 5
# `/rerun-test --repeat N` asks for N runs of each test on the head and on the base: `bot: max_repeat:`
# bounds N (default 20), never above MAX_REPEAT.
DEFAULT_MAX_REPEAT = 20
DEFAULT_BOT_LOGIN = "github-actions[bot]"
MAX_REPEAT = 1000
# How many tests one GPU runs at a time (`workers_per_gpu:` of a runner or a class). Most kernel tests use a
# sliver of a GPU and spend their time compiling on the CPU, so a GPU is shared; a test registered
# gpu="exclusive" (or marked exclusive_gpu), and every test of several GPUs, still holds its GPUs alone.
# `gpumatrix run` starts the runner's GPUs times this many workers, at most one per CPU. 8: on one H200
# with 16 CPUs (2026-12-04, benchmarks/log/gpu-job.md), the 1-gpu-h100 slice ran in 131 s cold
# and 28 s warm with 8 tests per GPU, and in 119 s cold and 35 s warm with 16.
DEFAULT_WORKERS_PER_GPU = 8
# The most tests that may share one GPU: a lease of a whole GPU takes this many slots (gpumatrix.running.leases).
MAX_WORKERS_PER_GPU = 32
# Ordered as GitHub's collaborator roles: a level grants everything to its left.
PERMISSION_LEVELS = ("none", "read", "triage", "write", "maintain", "admin")
# Labels travel into workflow inputs and shell environments: keep them to a safe alphabet.
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_CAPABILITY_RE = re.compile(r"^(\d{1,2})\.(\d{1,2})$")
_GFX_RE = re.compile(r"^gfx[0-9a-f]{3,4}$")
_LOGIN_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")


class MatrixError(ProblemsError, UsageError):
    """`ci/matrix.yaml` is invalid (exit 2); `problems` holds every problem found, in file order."""

    summary = "invalid runner matrix"


@dataclass(frozen=True)
class GpuClass:
    """A GPU class: NVIDIA's defined by compute capability (device names for display only), AMD's by
    gfx architecture, Intel's by device name (a case-insensitive part of it)."""

    name: str
    description: str
    compute_capabilities: tuple[tuple[int, int], ...]
    device_names: tuple[str, ...] = ()
    vendor: str = "nvidia"
    architectures: tuple[str, ...] = ()  # AMD: gfx942, gfx950
    workers_per_gpu: int | None = None  # tests one GPU of the class runs at a time; None: the default

    @property
    def is_cpu(self) -> bool:
        return self.name == CPU_CLASS

    def matches(self, vendor: str, capability: tuple[int, int], arch: str, name: str) -> bool:
        """Whether a device of `vendor` with this compute capability (NVIDIA), gfx architecture (AMD)
        or name (Intel) is of this class."""
        if self.is_cpu or vendor != self.vendor:
            return False
        if vendor == "nvidia":
            return capability in self.compute_capabilities
        if vendor == "amd":
            return arch.split(":", 1)[0] in self.architectures
        return any(pattern.lower() in name.lower() for pattern in self.device_names)


@dataclass(frozen=True)
class Runner:
    """A CI runner: one class, a GPU count, its `runs-on` labels, a job timeout and a shard limit."""

    label: str
    gpu_class: str
    gpus: int
    runs_on: tuple[str, ...]
    timeout_minutes: int
    max_shards: int = 1
    workers_per_gpu: int | None = None  # tests one of its GPUs runs at a time; None: its class's


@dataclass(frozen=True)
class WorkersPerGpu:
    """How many tests share one GPU, and where that number comes from (shown in `gpumatrix run`'s header)."""

    count: int
    source: str  # "runner 1-gpu-h100", "class h100", "the default", "GPUMATRIX_WORKERS_PER_GPU"


@dataclass(frozen=True)
class BotConfig:
    """Settings of the /rerun-test bot (frozen defaults, fail closed)."""

    permission: str = "write"
    allow_edits: bool = False
    workflow: str = "gpu-tests.yml"
    ref: str = "main"
    max_repeat: int = DEFAULT_MAX_REPEAT  # the largest N of `/rerun-test --repeat N`
    # The bot's own GitHub login: only its comments are its status and CI-states comments. A workflow's
    # GITHUB_TOKEN acts as github-actions[bot]; a GitHub App's token as <app-slug>[bot].
    login: str = DEFAULT_BOT_LOGIN


@dataclass(frozen=True)
class Matrix:
    classes: Mapping[str, GpuClass]
    runners: tuple[Runner, ...]
    bot: BotConfig = field(default_factory=BotConfig)
    source: str = "ci/matrix.yaml"
    # name: description; the built-in ones always among them
    suites: Mapping[str, str] = field(default_factory=lambda: BUILTIN_SUITES)
    # Repository-relative directories holding the test files (`test_roots:`), '/'-separated.
    test_roots: tuple[str, ...] = DEFAULT_TEST_ROOTS
    # reruns after a failure of a test of a file registered flaky= on the class it runs as (`flaky: reruns:`)
    flaky_reruns: int = DEFAULT_FLAKY_RERUNS

    def runner(self, label: str) -> Runner | None:
        for runner in self.runners:
            if runner.label == label:
                return runner
        return None

    def require_runner(self, label: str) -> Runner:
        """The runner labelled `label`; a `UsageError` naming the labels there are when none is.

        The one check of a `--runner LABEL` option, for the CLI and the pytest plugin alike.
        """
        runner = self.runner(label)
        if runner is None:
            raise UsageError(
                f"--runner {label!r} is not a runner of {self.source} "
                f"(labels: {', '.join(r.label for r in self.runners)})"
            )
        return runner

    def require_suite(self, name: str) -> str | None:
        """The suite a `--suite NAME` option selects: NAME, or None for `all`; a `UsageError` naming the
        suites there are when NAME is none of them."""
        if name == ALL_SUITES:
            return None
        if name not in self.suites:
            raise UsageError(
                f"--suite {name!r} is not a suite of {self.source} "
                f"(suites: {', '.join(self.suites)}, or {ALL_SUITES})"
            )
        return name

    def workers_per_gpu(self, class_name: str | None, runner: Runner | None = None) -> WorkersPerGpu:
        """Tests one GPU runs at a time: the runner's `workers_per_gpu`, else its class's, else the default."""
        if runner is not None and runner.workers_per_gpu is not None:
            return WorkersPerGpu(runner.workers_per_gpu, f"runner {runner.label}")
        gpu_class = self.classes.get(runner.gpu_class if runner is not None else class_name or "")
        if gpu_class is not None and gpu_class.workers_per_gpu is not None:
            return WorkersPerGpu(gpu_class.workers_per_gpu, f"class {gpu_class.name}")
        return WorkersPerGpu(DEFAULT_WORKERS_PER_GPU, "the default")

    def runners_of(self, class_name: str) -> tuple[Runner, ...]:
        return tuple(r for r in self.runners if r.gpu_class == class_name)

    def runner_for(self, class_name: str, gpus: int) -> Runner | None:
        """The runner of `class_name` with the fewest GPUs that is still >= `gpus` (file order breaks ties).

        On the CPU class every file fits the (GPU-less) runner: a CPU test needs no GPU.
        """
        candidates = self.runners_of(class_name)
        if class_name == CPU_CLASS:
            return candidates[0] if candidates else None
        fitting = [r for r in candidates if r.gpus >= gpus]
        return min(fitting, key=lambda r: r.gpus) if fitting else None

    def class_for_capability(self, capability: tuple[int, int]) -> GpuClass | None:
        return self.class_for_device("nvidia", capability)

    def class_for_device(
        self, vendor: str, capability: tuple[int, int] = (0, 0), arch: str = "", name: str = ""
    ) -> GpuClass | None:
        """The class a device of `vendor` belongs to (`GpuClass.matches`), or None."""
        return classify_device(self.classes, vendor, capability, arch, name)

    def in_test_roots(self, path: str) -> bool:
        """Whether the repository-relative '/'-path lies under one of the test roots."""
        return any(path.startswith(f"{root}/") for root in self.test_roots)


def classify_device(
    classes: Mapping[str, GpuClass], vendor: str, capability: tuple[int, int], arch: str = "", name: str = ""
) -> GpuClass | None:
    """The first class of `classes` the device matches, or None."""
    for gpu_class in classes.values():
        if gpu_class.matches(vendor, capability, arch, name):
            return gpu_class
    return None


def load_matrix(path: str | Path) -> Matrix:
    """Read and validate a matrix file; raises `MatrixError` listing every problem."""
    return parse_matrix(read_yaml_text(path, error=MatrixError, what="the runner matrix"), source=str(path))


def parse_matrix(text: str, *, source: str = "ci/matrix.yaml") -> Matrix:
    """Validate matrix YAML `text`; every problem is reported together, with its line."""
    root = compose_yaml(text, source, error=MatrixError, depth_needed="a runner matrix needs four")
    return _MatrixParser(source).parse(root)


class _MatrixParser(YamlReader):
    """The matrix's sections, over the node helpers of `YamlReader`."""

    # -- sections -------------------------------------------------------------------------------
    def parse(self, root: yaml.Node | None) -> Matrix:
        if root is None:
            self.error(None, "the runner matrix is empty (expected 'classes' and 'runners')")
            raise MatrixError(self.problems)
        top = self.check_keys(
            root, ("classes", "runners", "suites", "flaky", "bot", "test_roots"), "the runner matrix"
        )
        for required in ("classes", "runners"):
            if required not in top and isinstance(root, yaml.MappingNode):
                self.error(root, f"missing required key {required!r}")
        classes = self.parse_classes(top["classes"]) if "classes" in top else {}
        runners = self.parse_runners(top["runners"], classes) if "runners" in top else ()
        suites = self.parse_suites(top["suites"]) if "suites" in top else BUILTIN_SUITES
        bot = self.parse_bot(top["bot"]) if "bot" in top else BotConfig()
        roots = self.parse_test_roots(top["test_roots"]) if "test_roots" in top else DEFAULT_TEST_ROOTS
        reruns = self.parse_flaky(top["flaky"]) if "flaky" in top else DEFAULT_FLAKY_RERUNS
        if self.problems:
            raise MatrixError(sorted(self.problems, key=lambda p: p.line))
        return Matrix(
            classes=classes,
            runners=runners,
            bot=bot,
            source=self.source,
            suites=suites,
            test_roots=roots,
            flaky_reruns=reruns,
        )

    def parse_test_roots(self, node: yaml.Node) -> tuple[str, ...]:
        """`test_roots: [tests]`: directories relative to the repository root, each named once, none
        inside another (a file would be two roots' at once)."""
        roots: list[str] = []
        for text in self.string_list(node, "test_roots"):
            root = text.strip().rstrip("/")
            parts = root.split("/")
            if not root or root.startswith("/") or "\\" in root or any(p in ("", ".", "..") for p in parts):
                self.error(
                    node,
                    f"test root {text!r} must be a directory relative to the repository root, "
                    f"'/'-separated, without '.' or '..' (such as 'tests' or 'test')",
                )
                continue
            clash = next(
                (r for r in roots if root == r or root.startswith(f"{r}/") or r.startswith(f"{root}/")), None
            )
            if clash is not None:
                self.error(node, f"test root {root!r} overlaps {clash!r}: name each directory once")
                continue
            roots.append(root)
        if isinstance(node, yaml.SequenceNode) and not node.value:
            self.error(node, "test_roots must name at least one directory (such as [tests])")
        return tuple(roots) or DEFAULT_TEST_ROOTS

    def parse_flaky(self, node: yaml.Node) -> int:
        """`flaky: {reruns: K}`: how many times a test of a file registered flaky= runs again after a failure."""
        fields = self.check_keys(node, ("reruns",), "flaky")
        if "reruns" not in fields:
            return DEFAULT_FLAKY_RERUNS
        reruns = self.positive_int(fields["reruns"], "flaky reruns", allow_zero=True)
        if reruns > MAX_FLAKY_RERUNS:
            self.error(
                fields["reruns"],
                f"flaky reruns must be at most {MAX_FLAKY_RERUNS}, got {reruns}: more reruns pass a test "
                "that fails most of the time",
            )
        return reruns

    def parse_suites(self, node: yaml.Node) -> Mapping[str, str]:
        """`suites: {name: description}`: the built-in ones (which may be described again) and more."""
        suites = dict(BUILTIN_SUITES)
        for name, key_node, value_node in self.mapping(node, "suites"):
            if not _LABEL_RE.match(name):
                self.error(
                    key_node, f"suite {name!r}: suite names use letters, digits, '.', '_' and '-' only"
                )
            elif name == ALL_SUITES:
                self.error(
                    key_node,
                    f"{ALL_SUITES!r} cannot name a suite: `--suite {ALL_SUITES}` selects every suite",
                )
            suites[name] = self.text(value_node, f"suite {name!r} description", default=name)
        return MappingProxyType(suites)

    def parse_classes(self, node: yaml.Node) -> dict[str, GpuClass]:
        classes: dict[str, GpuClass] = {}
        owner_of: dict[object, str] = {}  # a capability or a gfx architecture: the class that has it
        allowed = ("description", "compute_capability", "device_names", "vendor", "gfx", "workers_per_gpu")
        for name, key_node, value_node in self.mapping(node, "classes"):
            where = f"class {name!r}"
            fields = self.check_keys(value_node, allowed, where)
            here = value_node if isinstance(value_node, yaml.MappingNode) else key_node
            vendor = self.text(fields["vendor"], f"{where} vendor") if "vendor" in fields else "nvidia"
            if name == CPU_CLASS and "vendor" in fields:
                self.error(fields["vendor"], f"class {CPU_CLASS!r} means no GPU: it has no vendor")
            elif vendor not in VENDORS:
                self.error(fields["vendor"], f"{where} vendor {vendor!r} is not one of {', '.join(VENDORS)}")
            names_node = fields.get("device_names")
            device_names = self.string_list(names_node, f"{where} device_names") if names_node else ()
            capabilities: tuple[tuple[int, int], ...] = ()
            architectures: tuple[str, ...] = ()
            if name == CPU_CLASS or vendor == "nvidia":
                capabilities = self._capabilities(
                    fields.get("compute_capability"), name, where, here, owner_of
                )
            elif "compute_capability" in fields:
                self.error(
                    fields["compute_capability"], f"{where}: a {vendor} class has no compute capability"
                )
            if vendor == "amd" and name != CPU_CLASS:
                architectures = self._architectures(fields.get("gfx"), name, where, here, owner_of)
            elif "gfx" in fields:
                self.error(fields["gfx"], f"{where}: only an amd class names gfx architectures")
            if vendor == "intel" and name != CPU_CLASS and not device_names:
                self.error(
                    names_node or here,
                    f"{where} needs 'device_names' (parts of the name its GPUs report, such as "
                    f'["Data Center GPU Max"]): an intel class is told by name',
                )
            description = fields.get("description")
            workers = self._workers_per_gpu(fields.get("workers_per_gpu"), where)
            if workers is not None and name == CPU_CLASS:
                self.error(fields["workers_per_gpu"], f"class {CPU_CLASS!r} has no GPU to share")
            classes[name] = GpuClass(
                name=name,
                description=self.text(description, f"{where} description", default=name)
                if description is not None
                else name,
                compute_capabilities=capabilities,
                device_names=device_names,
                vendor="none" if name == CPU_CLASS else vendor,
                architectures=architectures,
                workers_per_gpu=workers,
            )
        if CPU_CLASS not in classes and isinstance(node, yaml.MappingNode):
            self.error(node, f"the class {CPU_CLASS!r} (no GPU) must be defined")
        return classes

    def _capabilities(
        self, cc_node: yaml.Node | None, name: str, where: str, here: yaml.Node, owner_of: dict[object, str]
    ) -> tuple[tuple[int, int], ...]:
        capabilities: list[tuple[int, int]] = []
        if cc_node is None:
            self.error(
                here, f"{where} needs 'compute_capability' (a list like [\"9.0\"]; [] for {CPU_CLASS!r})"
            )
            return ()
        for text in self.string_list(cc_node, f"{where} compute_capability"):
            match = _CAPABILITY_RE.match(text)
            if match is None:
                self.error(cc_node, f"{where}: compute capability {text!r} is not of the form 'major.minor'")
                continue
            capability = (int(match[1]), int(match[2]))
            if capability in owner_of:
                self.error(
                    cc_node,
                    f"{where}: compute capability {text} already belongs to class {owner_of[capability]!r}",
                )
            owner_of[capability] = name
            capabilities.append(capability)
        if name == CPU_CLASS and capabilities:
            self.error(cc_node, f"class {CPU_CLASS!r} means no GPU: its compute_capability must be []")
        if name != CPU_CLASS and not capabilities:
            self.error(cc_node, f"{where} has no compute capability; only {CPU_CLASS!r} may have none")
        return tuple(capabilities)

    def _architectures(
        self, node: yaml.Node | None, name: str, where: str, here: yaml.Node, owner_of: dict[object, str]
    ) -> tuple[str, ...]:
        if node is None:
            self.error(here, f"{where} needs 'gfx' (its gfx architectures, such as [\"gfx942\"])")
            return ()
        found: list[str] = []
        for text in self.string_list(node, f"{where} gfx"):
            if not _GFX_RE.match(text):
                self.error(node, f"{where}: {text!r} is not a gfx architecture such as 'gfx942'")
                continue
            if ("gfx", text) in owner_of:
                self.error(node, f"{where}: {text} already belongs to class {owner_of['gfx', text]!r}")
            owner_of["gfx", text] = name
            found.append(text)
        if not found:
            self.error(node, f"{where} names no gfx architecture")
        return tuple(found)

    def parse_runners(self, node: yaml.Node, classes: Mapping[str, GpuClass]) -> tuple[Runner, ...]:
        if not isinstance(node, yaml.SequenceNode):
            self.error(node, "runners must be a list")
            return ()
        allowed = ("label", "class", "gpus", "runs_on", "timeout_minutes", "max_shards", "workers_per_gpu")
        runners: list[Runner] = []
        labels: dict[str, int] = {}
        served: dict[tuple[str, int], tuple[str, int]] = {}  # (class, gpus): (label, line) of its runner
        for index, item in enumerate(node.value):
            fields = self.check_keys(item, allowed, f"runner #{index + 1}")
            label = self.text(fields["label"], f"runner #{index + 1} label") if "label" in fields else ""
            where = f"runner {label!r}" if label else f"runner #{index + 1}"
            for required in ("label", "class", "runs_on", "timeout_minutes"):
                if required not in fields and isinstance(item, yaml.MappingNode):
                    self.error(item, f"{where} is missing required key {required!r}")
            if label:
                if not _LABEL_RE.match(label):
                    self.error(fields["label"], f"{where}: labels use letters, digits, '.', '_' and '-' only")
                if label in labels:
                    self.error(
                        fields["label"],
                        f"duplicate runner label {label!r} (first defined on line {labels[label]})",
                    )
                else:
                    labels[label] = fields["label"].start_mark.line + 1
            class_name = self.text(fields["class"], f"{where} class") if "class" in fields else ""
            if class_name and class_name not in classes:
                self.error(
                    fields["class"],
                    f"{where} names unknown class {class_name!r} (known: {', '.join(classes) or 'none'})",
                )
            is_cpu = class_name == CPU_CLASS
            gpus = 0
            if "gpus" in fields:
                gpus = self.positive_int(fields["gpus"], f"{where} gpus", allow_zero=is_cpu, maximum=MAX_GPUS)
                if is_cpu and gpus:
                    self.error(fields["gpus"], f"{where}: a {CPU_CLASS!r} runner has no GPUs (gpus: 0)")
            elif not is_cpu and isinstance(item, yaml.MappingNode):
                self.error(item, f"{where} is missing required key 'gpus'")
            runs_on = self.string_list(fields["runs_on"], f"{where} runs_on") if "runs_on" in fields else ()
            if "runs_on" in fields and not runs_on:
                self.error(fields["runs_on"], f"{where} runs_on must name at least one label")
            timeout = (
                self.positive_int(fields["timeout_minutes"], f"{where} timeout_minutes")
                if "timeout_minutes" in fields
                else 0
            )
            shards = (
                self.positive_int(fields["max_shards"], f"{where} max_shards", maximum=MAX_SHARDS)
                if "max_shards" in fields
                else 1
            )
            if class_name in classes and ("gpus" in fields or is_cpu):
                # A file goes to the first runner of its class with the fewest GPUs that fit: a second
                # runner with the same class and count would never be given one.
                first = served.setdefault((class_name, gpus), (label, item.start_mark.line + 1))
                if first[1] != item.start_mark.line + 1:
                    self.error(
                        fields.get("gpus", fields["class"]),
                        f"{where} has the class {class_name!r} and GPU count {gpus} of runner "
                        f"{first[0]!r} (line {first[1]}): every file would go to that one and this "
                        f"runner would never run any; remove it or give it another GPU count",
                    )
            workers = self._workers_per_gpu(fields.get("workers_per_gpu"), where)
            if workers is not None and is_cpu:
                self.error(fields["workers_per_gpu"], f"{where}: a {CPU_CLASS!r} runner has no GPU to share")
            runners.append(Runner(label, class_name, gpus, runs_on, timeout, shards, workers))
        return tuple(runners)

    def _workers_per_gpu(self, node: yaml.Node | None, where: str) -> int | None:
        """`workers_per_gpu: N`, 1 (each test holds a GPU alone) to MAX_WORKERS_PER_GPU; None when absent."""
        if node is None:
            return None
        workers = self.positive_int(node, f"{where} workers_per_gpu")
        if workers > MAX_WORKERS_PER_GPU:
            self.error(
                node, f"{where} workers_per_gpu must be from 1 to {MAX_WORKERS_PER_GPU}, got {workers}"
            )
        return workers if 1 <= workers <= MAX_WORKERS_PER_GPU else None

    def parse_bot(self, node: yaml.Node) -> BotConfig:
        fields = self.check_keys(
            node, ("permission", "allow_edits", "workflow", "ref", "max_repeat", "login"), "bot"
        )
        defaults = BotConfig()
        permission = (
            self.text(fields["permission"], "bot permission", default=defaults.permission)
            if "permission" in fields
            else defaults.permission
        )
        if permission not in PERMISSION_LEVELS:
            self.error(
                fields["permission"],
                f"bot permission {permission!r} is not one of {', '.join(PERMISSION_LEVELS)}",
            )
        allow_edits = (
            self.value(fields["allow_edits"], "bot allow_edits")
            if "allow_edits" in fields
            else defaults.allow_edits
        )
        if allow_edits is INVALID:
            allow_edits = False
        elif not isinstance(allow_edits, bool):
            self.error(fields["allow_edits"], f"bot allow_edits must be true or false, got {allow_edits!r}")
            allow_edits = False
        workflow = (
            self.text(fields["workflow"], "bot workflow") if "workflow" in fields else defaults.workflow
        )
        ref = self.text(fields["ref"], "bot ref") if "ref" in fields else defaults.ref
        max_repeat = defaults.max_repeat
        if "max_repeat" in fields:
            max_repeat = self.positive_int(fields["max_repeat"], "bot max_repeat")
            if max_repeat > 0 and not 2 <= max_repeat <= MAX_REPEAT:
                self.error(
                    fields["max_repeat"], f"bot max_repeat must be from 2 to {MAX_REPEAT}, got {max_repeat}"
                )
        login = self.text(fields["login"], "bot login") if "login" in fields else defaults.login
        if "login" in fields and login and not _LOGIN_RE.match(login):
            self.error(fields["login"], f"bot login {login!r} is not a GitHub login (such as my-app[bot])")
        return BotConfig(
            permission=permission,
            allow_edits=allow_edits,
            workflow=workflow,
            ref=ref,
            max_repeat=max_repeat,
            login=login,
        )
