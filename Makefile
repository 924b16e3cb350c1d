# Sequence Models for NLP — build the book, run the checks, release and grade problem sets.
#   make book          build the website into _build/html, executing every chapter
#   make test          every check: lint, library tests, grading round trip, book build, site in a browser
#   make assignments   regenerate every problem set's references and student release
#   make grade PS=ps1  grade every submission under grading/submitted/ on Dask workers (a local cluster,
#                      or SCHEDULER=tcp://host:8786; each kernel in a bubblewrap
#                      sandbox), then feedback and grades CSV; FLAGS="--jobs 4 --force ..." passes options
#   make release       what students get, in _build/release: the site, a student repository (one
#                      commit, from an allow-list) and its archive, searched for every secret
# The first use creates .venv and installs requirements.txt (exact pins, ends with `-e .`).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CACHE  := _build/.jupyter_cache
export PATH := $(abspath $(BIN)):$(PATH)

PROBLEM_SETS := $(notdir $(patsubst %/,%,$(dir $(wildcard solutions/*/*.ipynb))))

# `make book` succeeded after the last change to any of these (`make release` reuses that build)
BOOK_BUILT  := _build/.book-built
BOOK_INPUTS := _config.yml _toc.yml requirements.txt $(shell find book lib assignments -type f \
  -not -path 'book/_generated/*' -not -path '*/__pycache__/*' -not -path '*.egg-info/*' \
  -not -path '*/.ipynb_checkpoints/*' 2>/dev/null)

.PHONY: venv book test lint pytest site-test clean assignments grade release

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $(STAMP)

# Jupyter Book's cache keys a chapter on its code cells only; book/_ext/execution_cache.py also keys
# each chapter on the lib/ modules it imports (transitively) and requirements.txt, and re-executes
# just the chapters whose key changed.
book: $(STAMP)
	@rm -rf _build/html/reports
	@$(BIN)/jupyter-book build . --builder html -W -n --keep-going || { \
	  echo; echo "BOOK BUILD FAILED."; \
	  for log in $$(find _build/html/reports -name '*.err.log' 2>/dev/null); do \
	    echo "  chapter failed to execute: $${log#_build/html/reports/}  (traceback in $$log)"; \
	  done | sed 's/\.err\.log  (/.md  (/'; exit 1; }
	@touch $(BOOK_BUILT)

lint: $(STAMP)
	$(BIN)/ruff check lib tests benchmarks book/_ext nbgrader_config.py
	$(BIN)/ruff format --check lib tests benchmarks book/_ext

pytest: $(STAMP)
	$(BIN)/python -m pytest -m "not browser and not built" --durations=40

site-test: $(STAMP)
	$(BIN)/python -m pytest -m "browser or built" -n 2  # two browsers: the pages load in half the time

test: lint pytest book site-test

# References come from running each solution notebook through the same capture as grading; the
# release is nbgrader's. Both are deterministic: regenerating an unchanged source changes nothing.
assignments: $(STAMP)
	@for ps in $(PROBLEM_SETS); do \
	  echo "== $$ps: references, then the student release"; \
	  $(BIN)/python -m seqmodels.grading.references solutions/$$ps/$$ps.ipynb || exit 1; \
	  $(BIN)/nbgrader generate_assignment $$ps --force --log-level=WARN || exit 1; \
	done

grade: $(STAMP)
	@test -n "$(PS)" || { echo "usage: make grade PS=ps1 (one of: $(PROBLEM_SETS))"; exit 2; }
	$(BIN)/python -m seqmodels.grading.run $(PS) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(FLAGS)

# The student release of the committed course (HEAD; FLAGS=--allow-dirty to release HEAD from a tree
# with changes): the book is rebuilt only if an input changed since the last successful build.
$(BOOK_BUILT): $(BOOK_INPUTS) $(STAMP)
	@$(MAKE) --no-print-directory book

release: $(BOOK_BUILT)
	$(BIN)/python -m seqmodels.grading.release build $(FLAGS)

clean:
	rm -rf _build book/_generated
