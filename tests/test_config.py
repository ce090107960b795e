"""Configuration: every shipped config loads, ``--set`` overrides of each type, clear errors
naming ``section.key``, cross-section checks, and save/load round trips."""

from __future__ import annotations

import logging
import typing
from pathlib import Path
from typing import Any

import pytest

from azserve.backends import BACKENDS, BackendConfig, make_backend
from azserve.config.load import MOVED, apply_overrides, parse_override, to_dict
from azserve.config.schema import Config, config_from_data, load_config, replace, save_config
from azserve.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.toml"))
TTT = REPO / "configs" / "tictactoe.toml"


def test_configs_exist() -> None:
    assert {p.stem for p in CONFIGS} >= {"tictactoe", "connect4"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_config_loads(path: Path) -> None:
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    # Named after its game (its parameters aside: chess(max_plies=256,history=1)) or the rules
    # that game encodes (go9.toml plays go9-features); variants (A/B candidates) add a suffix:
    # connect4-puct.toml.
    from actors.games import make_game

    game = make_game(cfg.game)
    names = {cfg.game.partition("(")[0], game.rules.partition("(")[0]}
    assert any(path.stem == n or path.stem.startswith(f"{n}-") for n in names), names
    # The net fits the game it is configured for.
    assert cfg.net.obs_shape == game.obs_shape
    assert cfg.net.num_actions == game.num_actions
    assert cfg.client.max_rows <= cfg.server.max_batch_size
    # azserve serve --config reads the same file the same way (the net's shape from the game).
    from azserve.run.serve import serve_config

    assert serve_config(str(path), [], None) == cfg


def test_overrides_of_each_type() -> None:
    cfg = load_config(
        TTT,
        [
            "server.max_batch_size=128",  # int
            "client.max_rows=64",
            "trainer.lr=0.125",  # float
            "mcts.c_puct=2",  # an int where a float is expected is a float
            "mcts.reuse_tree=false",  # bool
            "server.bind=tcp://127.0.0.1:7001",  # bare string (not valid TOML: kept as text)
            'client.server="tcp://127.0.0.1:7001"',  # quoted string
            'learner.servers=["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"]',  # list -> tuple
            "trainer.lr_milestones=[100, 200]",
            "trainer.grad_clip=1.5",  # float | None
            "game=tictactoe",  # top-level key
        ],
    )
    assert cfg.server.max_batch_size == 128 and cfg.client.max_rows == 64
    assert cfg.trainer.lr == 0.125
    assert cfg.mcts.c_puct == 2.0 and isinstance(cfg.mcts.c_puct, float)
    assert cfg.mcts.reuse_tree is False
    assert cfg.server.bind == "tcp://127.0.0.1:7001"
    assert cfg.client.server == "tcp://127.0.0.1:7001"
    assert cfg.learner.servers == ("tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555")
    assert cfg.trainer.lr_milestones == (100, 200)
    assert cfg.trainer.grad_clip == 1.5
    # Untouched keys keep the file's values.
    base = load_config(TTT)
    assert cfg.net == base.net and cfg.replay == base.replay


def test_later_override_wins() -> None:
    cfg = load_config(TTT, ["trainer.lr=0.1", "trainer.lr=0.2"])
    assert cfg.trainer.lr == 0.2


def test_no_file_gives_defaults() -> None:
    assert load_config(None) == Config()


def test_parse_override() -> None:
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a.b = true") == (["a", "b"], True)
    assert parse_override("a.b=x y") == (["a", "b"], "x y")
    for bad in ("a.b", "a..b=1", ".a=1"):
        with pytest.raises(ConfigError, match="--set"):
            parse_override(bad)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("server.max_batch_sise=8", "server.max_batch_sise"),
        ("nosuchsection.key=1", "nosuchsection"),
        ("trainer.nosuchkey=1", "trainer.nosuchkey"),
    ],
)
def test_unknown_key_is_named(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: unknown key") as info:
        load_config(TTT, [override])
    assert "known keys" in str(info.value)


@pytest.mark.parametrize(
    ("override", "key", "expected"),
    [
        ("server.max_batch_size=x", "server.max_batch_size", "an integer"),
        ("server.max_batch_size=1.5", "server.max_batch_size", "an integer"),
        ("server.max_batch_size=true", "server.max_batch_size", "an integer"),
        ("trainer.lr=fast", "trainer.lr", "a number"),
        ("mcts.reuse_tree=1", "mcts.reuse_tree", "true or false"),
        ("server.bind=5", "server.bind", "a string"),
        ("learner.servers=tcp://x:1", "learner.servers", "a list"),
        ("trainer.lr_milestones=[1, 'a']", r"trainer.lr_milestones\[1\]", "an integer"),
        ("trainer.optimizer=adam", "trainer.optimizer", r"one of \['sgd', 'adamw'\]"),
    ],
)
def test_bad_type_names_key_and_expected_type(override: str, key: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: (expected|must be) {expected}"):
        load_config(TTT, [override])


def test_section_that_is_not_a_table() -> None:
    with pytest.raises(ConfigError, match="server"):
        load_config(TTT, ["server=3"])
    with pytest.raises(ConfigError, match="--set 'server.bind.x=1': bind is not a table"):
        load_config(TTT, ["server.bind.x=1"])


def test_range_checks_name_the_key() -> None:
    with pytest.raises(ConfigError, match="trainer.batch_size"):
        load_config(TTT, ["trainer.batch_size=0"])
    with pytest.raises(ConfigError, match="replay.min_size"):
        load_config(TTT, ["replay.min_size=999999"])
    with pytest.raises(ConfigError, match="num_simulations"):
        load_config(TTT, ["mcts.num_simulations=0"])


def test_unknown_game() -> None:
    with pytest.raises(ConfigError, match="game: unknown game 'xiangqi'"):
        load_config(TTT, ["game=xiangqi"])


def test_client_rows_over_server_batch_refused() -> None:
    with pytest.raises(ConfigError, match=r"client.max_rows=512 exceeds server.max_batch_size=256"):
        load_config(TTT, ["client.max_rows=512"])
    # Equal is fine, and so is raising both.
    assert load_config(TTT, ["client.max_rows=256"]).client.max_rows == 256
    cfg = load_config(TTT, ["client.max_rows=512", "server.max_batch_size=512"])
    assert cfg.client.max_rows == 512


def test_client_model_must_match_server_model() -> None:
    with pytest.raises(ConfigError, match="client.model"):
        load_config(TTT, ["client.model=other"])


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\nbind = 1\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(bad)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_save_load_round_trip(path: Path, tmp_path: Path) -> None:
    cfg = load_config(path)
    out = save_config(cfg, tmp_path / "sub" / "config.toml")
    assert out.is_file()
    assert load_config(out) == cfg


def test_round_trip_of_unusual_values(tmp_path: Path) -> None:
    cfg = load_config(
        TTT,
        [
            "trainer.grad_clip=0.5",
            "trainer.lr=1e-05",
            "trainer.lr_milestones=[10, 20, 30]",
            'learner.servers=["ipc:///tmp/a b/server", "tcp://127.0.0.1:1"]',
            'actors.file="C:\\\\runs\\\\x \\"quoted\\".azt"',
            "backend.torch.batch_buckets=[]",
            "train.minutes=0.1",
        ],
    )
    assert cfg.actors.file == 'C:\\runs\\x "quoted".azt'
    assert load_config(save_config(cfg, tmp_path / "c.toml")) == cfg
    # None (no clipping) is written as an absent key and reads back as None.
    plain = replace(cfg, trainer={"grad_clip": None})
    text = save_config(plain, tmp_path / "d.toml").read_text()
    assert "grad_clip" not in text
    assert load_config(tmp_path / "d.toml") == plain


def test_overrides_apply_to_saved_config(tmp_path: Path) -> None:
    cfg = load_config(TTT)
    path = save_config(cfg, tmp_path / "c.toml")
    assert load_config(path, ["trainer.lr=0.3"]) == replace(cfg, trainer={"lr": 0.3})


def _keys(cls: type, prefix: str = "") -> dict[str, tuple[type, Any, Any]]:
    """``section.key`` (``section.table.key`` inside a table) -> (its section's class, its
    name, its type) for every non-table key of ``cls``."""
    import dataclasses
    import typing

    out = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(_keys(hints[f.name], f"{key}."))
        elif prefix:
            out[key] = (cls, f.name, hints[f.name])
    return out


def test_every_numeric_key_has_a_range() -> None:
    """A new numeric key cannot be added without its allowed range."""
    from azserve.config.ranges import RANGES, check_value

    keys = _keys(Config)
    numeric = (int, float, float | None, int | None)
    missing = [
        key
        for key, (cls, name, tp) in keys.items()
        if tp in numeric and not isinstance(getattr(cls(), name), bool) and key not in RANGES
    ]
    assert not missing, f"keys without a range in azserve/config/ranges.py: {missing}"
    defaults = Config()
    for key in RANGES:  # the defaults themselves are in range
        value: Any = defaults
        for part in key.split("."):
            value = getattr(value, part)
        check_value(key, value)
    assert set(RANGES) <= set(keys), "a range for a key that does not exist"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("server.max_batch_size=-1", "server.max_batch_size=-1: must be in [1, 65,536]"),
        ("server.max_queue_delay_us=-1000", "server.max_queue_delay_us=-1000: must be in [0,"),
        ("server.max_queued_rows=-5", "server.max_queued_rows=-5: must be in [1,"),
        ("server.max_versions=0", "server.max_versions=0: must be in [1, 1,024]"),
        ("actors.games=0", "actors.games=0: must be in [1,"),
        ("trainer.lr=nan", "trainer.lr=nan"),
        ("client.heartbeat_s=0", "client.heartbeat_s=0.0: must be in [0.01, inf]"),
    ],
)
def test_out_of_range_values_name_key_value_and_range(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(REPO / "configs" / "connect4.toml", [override, "client.max_rows=1"])
    assert message in str(err.value)


# --- [backend], [backend.torch], [backend.triton] ---------------------------------------------

NEW_LAYOUT = """
game = "tictactoe"

[backend]
kind = "triton"
device = "cpu"
dtype = "float32"
threads = 2

[backend.torch]
compile = "jit"
batch_buckets = [4, 8]
auto_threads = true

[backend.triton]
url = "10.0.0.1:8001"
repository = "/srv/repo"
model_name = "az"
keep_versions = 9
dynamic_batching = true
"""

FLAT_LAYOUT = """
game = "tictactoe"

[backend]
kind = "triton"
device = "cpu"
dtype = "float32"
threads = 2
compile = "jit"
batch_buckets = [4, 8]
auto_threads = true
url = "10.0.0.1:8001"
repository = "/srv/repo"
triton_model_name = "az"
keep_versions = 9
triton_dynamic_batching = true
"""


def moved_notices(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "azserve.config"]


def test_backend_tables_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "new.toml"
    path.write_text(NEW_LAYOUT)
    with caplog.at_level(logging.INFO):
        b = load_config(path).backend
    assert not moved_notices(caplog)
    assert (b.kind, b.device, b.dtype, b.threads) == ("triton", "cpu", "float32", 2)
    assert b.torch.compile == "jit" and b.torch.batch_buckets == (4, 8) and b.torch.auto_threads
    assert b.triton.url == "10.0.0.1:8001" and b.triton.repository == "/srv/repo"
    assert b.triton.model_name == "az" and b.triton.keep_versions == 9
    assert b.triton.dynamic_batching is True
    # Keys of a table are overridden by their full name.
    over = load_config(path, ["backend.torch.compile=none", "backend.triton.max_inflight=2"])
    assert over.backend.torch.compile == "none" and over.backend.triton.max_inflight == 2


def test_flat_backend_keys_load_with_one_notice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    new, flat = tmp_path / "new.toml", tmp_path / "flat.toml"
    new.write_text(NEW_LAYOUT)
    flat.write_text(FLAT_LAYOUT)
    with caplog.at_level(logging.INFO):
        assert load_config(flat) == load_config(new)
    (notice,) = moved_notices(caplog)  # one line for the whole config
    assert "backend.compile -> backend.torch.compile" in notice
    assert "backend.triton_model_name -> backend.triton.model_name" in notice
    assert "backend.triton_dynamic_batching -> backend.triton.dynamic_batching" in notice
    assert caplog.records[-1].levelno == logging.WARNING
    # Flat --set overrides, as scripts and habits write them, land at the new place.
    caplog.clear()
    with caplog.at_level(logging.INFO):
        cfg = load_config(TTT, ["backend.compile=jit", "backend.url=h:1", "backend.max_threads=3"])
    assert cfg.backend.torch.compile == "jit" and cfg.backend.torch.max_threads == 3
    assert cfg.backend.triton.url == "h:1"
    (notice,) = moved_notices(caplog)
    assert "backend.url -> backend.triton.url" in notice
    # Every moved key has a place in the schema.
    keys = _keys(Config)
    assert all(new_key in keys for new_key in MOVED.values())


def test_later_override_wins_across_layouts(tmp_path: Path) -> None:
    """A file in one layout and an override in the other: the override wins either way."""
    new, flat = tmp_path / "new.toml", tmp_path / "flat.toml"
    new.write_text(NEW_LAYOUT)
    flat.write_text(FLAT_LAYOUT)
    assert load_config(new, ["backend.compile=inductor"]).backend.torch.compile == "inductor"
    assert load_config(flat, ["backend.torch.compile=none"]).backend.torch.compile == "none"
    assert (
        load_config(
            TTT, ["backend.torch.compile=jit", "backend.compile=none"]
        ).backend.torch.compile
        == "none"
    )
    # A whole section given by --set is read the same way.
    cfg = load_config(TTT, ['backend={kind="torch", compile="jit"}'])
    assert cfg.backend.torch.compile == "jit"


def test_old_and_new_place_of_one_key_in_one_file(tmp_path: Path) -> None:
    path = tmp_path / "both.toml"
    path.write_text(NEW_LAYOUT.replace("threads = 2\n", 'threads = 2\ncompile = "none"\n', 1))
    with pytest.raises(
        ConfigError, match=r"backend.compile and backend.torch.compile are both set"
    ):
        load_config(path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "backend.torch.url=h:1",
            r"backend.torch.url='h:1': unknown key in \[backend.torch\]; it belongs in \[backend.triton\] \(backend.triton.url\)",
        ),
        (
            "backend.triton.compile=jit",
            r"backend.triton.compile='jit': .* belongs in \[backend.torch\]",
        ),
        (
            "backend.torch.device=cpu",
            r"backend.torch.device='cpu': .* belongs in \[backend\] \(backend.device\)",
        ),
        ("backend.model_name=az", r"backend.model_name='az': .* belongs in \[backend.triton\]"),
    ],
)
def test_key_in_the_wrong_table_is_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(TTT, [override])


def test_unknown_key_of_a_table_is_named() -> None:
    with pytest.raises(
        ConfigError, match=r"^backend.torch.compil: unknown key; did you mean 'compile'\?"
    ):
        load_config(TTT, ["backend.torch.compil=none"])


def test_saved_config_is_in_the_new_layout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flat = tmp_path / "flat.toml"
    flat.write_text(FLAT_LAYOUT)
    cfg = load_config(flat)
    text = save_config(cfg, tmp_path / "run" / "config.toml").read_text()
    backend = text[text.index("[backend]") :]
    assert "[backend.torch]" in backend and "[backend.triton]" in backend
    assert "compile" not in backend[: backend.index("[backend.torch]")]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert load_config(tmp_path / "run" / "config.toml") == cfg
    assert not moved_notices(caplog)


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a whole config) with its backend keys written the old way."""
    backend = dict(data["backend"])
    for old, new in MOVED.items():
        *_, table, key = new.split(".")
        backend[old.split(".")[1]] = backend[table][key]
    del backend["torch"], backend["triton"]
    return {**data, "backend": backend}


def test_checkpoint_with_an_old_config_loads(tmp_path: Path) -> None:
    from azserve.arena.agent import agent_from_checkpoint
    from azserve.model.network import build_net
    from learner.checkpoint import save_checkpoint

    cfg = load_config(TTT, ["backend.device=cpu", "backend.torch.max_threads=2"])
    old = _flat(to_dict(cfg))
    assert "compile" in old["backend"] and "torch" not in old["backend"]
    state = {"model": build_net(cfg.net, seed=0).state_dict()}
    path = save_checkpoint(tmp_path, 1, 1, state, old)
    loaded, _ = agent_from_checkpoint(str(path))
    assert loaded == cfg
    # Read as azserve serve and the other commands read a checkpoint's config.
    assert config_from_data(apply_overrides(old, [])) == cfg
    over = config_from_data(apply_overrides(old, ["backend.torch.compile=jit"]))
    assert over.backend.torch.compile == "jit"


def test_make_backend_is_a_table() -> None:
    kinds = typing.get_args(typing.get_type_hints(BackendConfig)["kind"])
    assert set(BACKENDS) == set(kinds)
    with pytest.raises(
        ConfigError,
        match=r"backend.kind='tpu': unknown backend \(the kinds are torch, triton, synthetic\)",
    ):
        make_backend(Config().net, BackendConfig(kind="tpu"))  # type: ignore[arg-type]
