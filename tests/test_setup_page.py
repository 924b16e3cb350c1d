"""The "Setting up" page (book/setup.md): its commands are the README's, which
tests/test_student_install.py types into a fresh virtual environment; the macOS and Windows tabs
take the same steps in their own syntax, and the Colab cell installs the same package, with the
student extra, from the same repository."""

import re
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "book" / "setup.md").read_text(encoding="utf-8")
URL = "https://github.com/seqmodels-course/sequence-models-nlp.git"


def blocks(language: str) -> list[list[str]]:
    """The lines of every fenced block of `language` on the page."""
    found = re.findall(rf"```{language}\n(.*?)```", PAGE, re.S)
    return [[line.strip() for line in block.strip().splitlines()] for block in found]


def readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### For students", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#")[0].strip() for line in section.strip().splitlines()]


def test_linux_and_macos_are_the_tested_commands():
    bash = blocks("bash")
    assert len(bash) == 2  # Linux, macOS
    for block in bash:
        assert block == readme_commands()
    assert readme_commands()[0] == f"git clone {URL}"


def test_windows_takes_the_same_steps():
    (windows,) = blocks("powershell")
    linux = readme_commands()
    assert len(windows) == len(linux)
    assert windows[0] == linux[0]
    assert windows[1] == r"py -3.11 -m venv $HOME\seqmodels-env"
    assert windows[2] == r"& $HOME\seqmodels-env\Scripts\Activate.ps1"
    assert windows[3] == linux[3] == "pip install torch==2.13.0"
    assert windows[4] == linux[4].replace("./", ".\\")
    assert windows[5] == linux[5].replace("/", "\\")


def test_colab_installs_the_library_with_its_student_extra():
    (cell,) = blocks("ipython3")
    command = cell[0]
    assert command.startswith("!pip install ")
    requirement = Requirement(command.removeprefix("!pip install ").strip('"'))
    assert requirement.name == "seqmodels" and requirement.extras == {"student"}
    assert requirement.url == f"git+{URL}"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'name = "seqmodels"' in pyproject and "\nstudent = [" in pyproject
    assert "enable_custom_widget_manager()" in cell[2]
