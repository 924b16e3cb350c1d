"""nbgrader configuration of the course. The course directory is the repository root.

- sources (solutions, hidden tests, references) in solutions/, the student release in assignments/;
- submissions, autograded notebooks, feedback and the gradebook under grading/ (git-ignored);
- the gradebook is SQLite by default; set SEQMODELS_GRADEBOOK_URL to any SQLAlchemy URL
  (e.g. postgresql://user@host/course) to use another database;
- autograding runs our preprocessors (seqmodels.grading.preprocessors) inside nbgrader's own
  pipeline, so `nbgrader autograde`, `generate_feedback` and `export` work as usual; every
  student kernel runs in a bubblewrap sandbox (seqmodels.grading.sandbox).
"""

import os
from pathlib import Path

import nbgrader
from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    OverwriteKernelspec,
)

from seqmodels.grading import math_pages
from seqmodels.grading.preprocessors import (
    FeedbackExporter,
    FeedbackForStudents,
    GuardedExecute,
    JudgeCaptures,
    OverwriteCellsInOrder,
    SanitizeSubmission,
    SaveVerdicts,
    StudentTextAsText,
)

ROOT = Path(__file__).resolve().parent
NBGRADER_TEMPLATES = str(Path(nbgrader.__file__).parent / "server_extensions/formgrader/templates")
GRADING = ROOT / "grading"

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "sequence-models-nlp"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "assignments"
c.CourseDirectory.submitted_directory = "grading/submitted"
c.CourseDirectory.autograded_directory = "grading/autograded"
c.CourseDirectory.feedback_directory = "grading/feedback"
# references/ (reference outputs) and the README stay in solutions/, never in the release
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints",
    "*.pyc",
    "__pycache__",
    "feedback",
    "references",
    "README.md",
    "training_seeds*.json",  # the reference's seeds, and a variant's (PS4's model without attention)
    "bar_seeds.json",  # PS3's Elman RNN over seeds (benchmarks/ps3_elman_bar.py)
]
# Submissions from an LMS: its download (zip or tar.gz archives, or the notebooks themselves) goes in
# grading/downloaded/<ps>/archive/; `nbgrader zip_collect <ps>` copies each <student>/<ps>.ipynb or
# <student>_<ps>.ipynb found there (in any folder or archive) to grading/submitted/<student>/<ps>/.
# <student> is a safe id (as `make grade` requires); nbgrader matches the extracted file's whole path.
c.ZipCollectApp.downloaded_directory = "grading/downloaded"
# Problem Set 6 also collects the files its notebook submits beside it (`<student>/capstone.safetensors`
# or `<student>_capstone.safetensors`, and its log): they land in the same submission folder.
c.FileNameCollectorPlugin.named_regexp = (
    r".*/(?P<student_id>[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,99})[/_]"
    r"(?P<file_id>ps[0-9]+\.ipynb|capstone\.safetensors|capstone_log\.json)$"
)
c.FileNameCollectorPlugin.valid_ext = [".ipynb", ".safetensors", ".json"]
GRADING.mkdir(exist_ok=True)
c.CourseDirectory.db_url = os.environ.get(
    "SEQMODELS_GRADEBOOK_URL", f"sqlite:///{GRADING / 'gradebook.db'}?timeout=60"
)

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
# Written answers (part C): the model answer and the rubric sit in a `=== BEGIN MARK SCHEME ===`
# region of the question's read-only cell, right above the student's Markdown answer cell (which
# holds the points). nbgrader removes the region from the release, keeps it in the gradebook, and
# restores it into the autograded notebook that formgrader shows (a read-only cell's source comes
# back from the gradebook); FeedbackForStudents removes it again from every feedback page. nbgrader
# wants such regions in task cells only; a read-only cell is restored the same way.
c.ClearMarkScheme.enforce_metadata = False

c.OverwriteCells.add_missing_cells = True
c.Autograde.sanitize_preprocessors = [
    ClearOutput,
    SanitizeSubmission,
    DeduplicateIds,
    OverwriteKernelspec,
    OverwriteCellsInOrder,  # nbgrader's OverwriteCells, re-adding a deleted test cell where it was
    CheckCellMetadata,
]
c.Autograde.autograde_preprocessors = [
    GuardedExecute,
    JudgeCaptures,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveVerdicts,
    AssignLatePenalties,
    CheckCellMetadata,
    StudentTextAsText,
]
# Scores come from the grader's verdicts (SaveVerdicts), never from outputs; feedback drops the
# evidence written for instructors (a task held for review).
c.GenerateFeedback.preprocessors = [GetGrades, FeedbackForStudents, CSSHTMLHeaderPreprocessor]
c.GenerateFeedback.exporter_class = FeedbackExporter
# Math renders offline in formgrader and the feedback (seqmodels.grading.math_pages): our
# templates/base/mathjax.html.j2 replaces nbconvert's mathjax() macro (a CDN's MathJax 2) with the
# pinned MathJax 3, inlined, in safe mode; nbgrader's own templates (formgrade, feedback) follow.
c.HTMLExporter.extra_template_basedirs = [str(math_pages.TEMPLATES), NBGRADER_TEMPLATES]
c.HTMLExporter.filters = {
    "seqmodels_offline_mathjax": "seqmodels.grading.math_pages.offline_mathjax"
}
# Every student kernel runs in a bubblewrap sandbox (see seqmodels.grading.sandbox). "none" is
# for instructors who accept the risk: `make grade` sets it only with --unsafe-no-sandbox.
# the course implementations of the graded functions (PS1: ngram ... train; PS2: autodiff ... sgd;
# PS3: gradients, gated; PS4: attention, seq2seq; PS5: transformer, decoding, pretraining; PS6:
# bpe, bytebpe):
# absent from the kernel, and flagged if used.
# A module listed here that does not exist (yet) is simply not there for the kernel either: the
# sandbox copies an allow-list.
GRADED_IMPLEMENTATIONS = [
    "seqmodels.ngram",
    "seqmodels.metrics",
    "seqmodels.feedforward",
    "seqmodels.train",
    "seqmodels.autodiff",
    "seqmodels.rnn",
    "seqmodels.softmax",
    "seqmodels.jacobians",
    "seqmodels.sgd",
    "seqmodels.gradients",
    "seqmodels.gated",
    "seqmodels.attention",
    "seqmodels.seq2seq",
    "seqmodels.transformer",
    "seqmodels.decoding",
    "seqmodels.pretraining",
    "seqmodels.bpe",
    "seqmodels.bytebpe",
]
c.GuardedExecute.hidden_modules = GRADED_IMPLEMENTATIONS
c.GuardedExecute.sandbox = os.environ.get("SEQMODELS_SANDBOX", "bubblewrap")
c.GuardedExecute.timeout = int(os.environ.get("SEQMODELS_CELL_TIMEOUT", 30))
c.GuardedExecute.notebook_budget = int(os.environ.get("SEQMODELS_NOTEBOOK_BUDGET", 180))
c.GuardedExecute.memory_limit_mb = int(os.environ.get("SEQMODELS_MEMORY_LIMIT_MB", 4096))
c.GuardedExecute.max_processes = int(os.environ.get("SEQMODELS_MAX_PROCESSES", 64))
c.GuardedExecute.open_files = int(os.environ.get("SEQMODELS_OPEN_FILES", 256))
c.GuardedExecute.cpu_cores = float(os.environ.get("SEQMODELS_CPU_CORES", 1))
# "full" grades everything; "smoke" (the grading tests' profile for most submissions) does not run
# the training tasks' test cells (part B's held-out tiers), which then earn nothing
c.GuardedExecute.profile = os.environ.get("SEQMODELS_GRADING_PROFILE", "full")
# each kernel forked from a zygote with ipykernel and torch imported (0: each one started cold)
c.GuardedExecute.warm_kernels = os.environ.get("SEQMODELS_WARM_KERNELS", "1") != "0"
c.JudgeCaptures.references_root = c.GuardedExecute.references_root = str(ROOT / "solutions")

# Late work (seqmodels.grading.policies.PercentPerDay): a submission loses `percent_per_day` % of
# its score for each day or part of a day after the due date (`nbgrader db assignment add ps1
# --duedate=...`, plus any extension) and the grace period, at most `max_percent` %. Lateness
# needs the submission's timestamp: the exchange's `nbgrader submit` writes one; `zip_collect`
# only where its pattern has a (?P<timestamp>...) group. After `make grade`, `python -m
# seqmodels.grading.policies late ps1` applies the policy in the course's gradebook.
c.AssignLatePenalties.plugin_class = "seqmodels.grading.policies.PercentPerDay"
c.PercentPerDay.percent_per_day = 10.0
c.PercentPerDay.max_percent = 50.0
c.PercentPerDay.grace_minutes = 15.0
