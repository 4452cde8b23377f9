import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("gen_api_table", ROOT / "tools" / "gen_api_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_api_table", module)
    spec.loader.exec_module(module)
    return module


def test_readme_table_lists_exactly_what_api_versions_advertises():
    from kafkacompat.broker.dispatch import supported_versions

    tool = _tool()
    readme = (ROOT / "README.md").read_text()
    assert tool.replace_table(readme, tool.render_table()) == readme, "run tools/gen_api_table.py"
    body = readme.split(tool.START, 1)[1].split(tool.END, 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and line[2:3].isdigit()]
    served = [(int(r.split("|")[1]), r.split("|")[3].strip()) for r in rows]
    assert served == [(key, f"{low}-{high}") for key, low, high in supported_versions(cluster_mode=True)]
    cluster_only = [int(r.split("|")[1]) for r in rows if "(cluster mode only)" in r]
    single = {key for key, _, _ in supported_versions()}
    assert cluster_only and not set(cluster_only) & single


def test_missing_markers_are_an_error():
    tool = _tool()
    with pytest.raises(SystemExit):
        tool.replace_table("# no markers here\n", "| table |")


def test_readme_config_table_lists_every_option_with_its_effect():
    from kafkacompat.config import BROKER_OPTIONS

    tool = _tool()
    readme = (ROOT / "README.md").read_text()
    regenerated = tool.replace_config_table(readme, tool.render_config_table())
    assert regenerated == readme, "run tools/gen_api_table.py"
    body = readme.split(tool.CONFIG_START, 1)[1].split(tool.CONFIG_END, 1)[0]
    rows = [line.split(" | ") for line in body.splitlines() if line.startswith("| `")]
    listed = [(cells[0].removeprefix("| `").removesuffix("`"), cells[3].removesuffix(" |")) for cells in rows]
    assert listed == [(option.name, option.effect_text) for option in BROKER_OPTIONS]
    # what is refused is said where the setting is listed
    assert dict(listed)["listener.security.protocol.map"] == "honoured"  # every protocol, since TLS/SASL
    assert dict(listed)["transaction.state.log.num.partitions"] == "honoured"  # transactions are served


def test_check_covers_both_tables(tmp_path, monkeypatch):
    tool = _tool()
    readme = (ROOT / "README.md").read_text()
    copy = tmp_path / "README.md"
    monkeypatch.setattr(tool, "README", copy)
    copy.write_text(readme)
    assert tool.main(["--check"]) == 0
    for start, end in ((tool.START, tool.END), (tool.CONFIG_START, tool.CONFIG_END)):
        stale = tool.replace_between(readme, start, end, "| stale |")
        copy.write_text(stale)
        assert tool.main(["--check"]) == 1
        assert tool.main([]) == 0 and copy.read_text() == readme  # regenerating restores it
