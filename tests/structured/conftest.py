import sys
import pathlib

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from structured_tool import GrammarTool, load_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def grammar_tool():
    tool = GrammarTool()
    yield tool
    tool.close()


@pytest.fixture(scope="session")
def v3_tokenizer():
    return load_tokenizer()
