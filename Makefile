# Sequence Models for NLP — build the book, run the checks, release and grade problem sets.
#   make book          build the website into _build/html, executing every chapter
#   make book-instructor  the instructor's edition (worked solutions, teaching guide) into
#                      _build/instructor/_build/html, reusing the chapters' execution cache
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

.PHONY: venv book book-instructor test lint pytest site-test clean assignments grade release

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $(STAMP)

# Jupyter Book's cache keys a chapter on its code cells only; book/_ext/execution_cache.py also keys
# each chapter on the lib/ modules it imports (transitively) and requirements.txt, and re-executes
# just the chapters whose key changed.
# $(call build_book,OUTPUT,EDITION): the book into OUTPUT/html; on failure, name each page that failed to execute
define build_book
@rm -rf $(1)/html/reports
@SEQMODELS_EDITION=$(2) $(BIN)/jupyter-book build . $(if $(filter-out _build,$(1)),--path-output $(dir $(1))) --builder html -W -n --keep-going || { \
  echo; echo "BOOK BUILD FAILED ($(1)/html)."; \
  for log in $$(find $(1)/html/reports -name '*.err.log' 2>/dev/null); do \
    echo "  page failed to execute: $${log#$(1)/html/reports/}  (traceback in $$log)"; \
  done | sed 's/\.err\.log  (/.md  (/'; exit 1; }
endef

book: $(STAMP)
	$(call build_book,_build,student)
	@touch $(BOOK_BUILT)

# The instructor's edition: the book with the worked solutions and the teaching guide
# (book/instructor/, book/_ext/editions.py), from the same sources and execution cache, into its own
# folder. It never writes into the student site's _build/html.
book-instructor: $(STAMP)
	$(call build_book,_build/instructor/_build,instructor)

lint: $(STAMP)
	$(BIN)/ruff check lib tests benchmarks book/_ext nbgrader_config.py
	$(BIN)/ruff format --check lib tests benchmarks book/_ext

pytest: $(STAMP)
	$(BIN)/python -m pytest -m "not browser and not built" --durations=40

site-test: $(STAMP)
	$(BIN)/python -m pytest -m "browser or built" -n 2  # two browsers: the pages load in half the time

test: lint pytest book book-instructor site-test

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
