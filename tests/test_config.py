"""Configuration: every shipped config loads, ``--set`` overrides of each type, clear errors
naming ``section.key``, cross-section checks, and save/load round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from azserve.config.load import parse_override
from azserve.config.schema import Config, load_config, replace, save_config
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
    with pytest.raises(ConfigError, match="game: unknown game 'shogi'"):
        load_config(TTT, ["game=shogi"])


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
            "backend.batch_buckets=[]",
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


def test_every_numeric_key_has_a_range() -> None:
    """A new numeric key cannot be added without its allowed range."""
    import dataclasses
    import typing

    from azserve.config.ranges import RANGES, check_value

    missing = []
    hints = typing.get_type_hints(Config)
    for section in dataclasses.fields(Config):
        tp = hints[section.name]
        if not dataclasses.is_dataclass(tp):
            continue
        for f in dataclasses.fields(tp):
            value = getattr(tp(), f.name)
            numeric = typing.get_type_hints(tp)[f.name] in (int, float, float | None, int | None)
            if numeric and not isinstance(value, bool) and f"{section.name}.{f.name}" not in RANGES:
                missing.append(f"{section.name}.{f.name}")
    assert not missing, f"keys without a range in azserve/config/ranges.py: {missing}"
    defaults = Config()
    for key in RANGES:  # the defaults themselves are in range
        section, name = key.split(".")
        check_value(key, getattr(getattr(defaults, section), name))
    assert set(RANGES) <= {
        f"{s.name}.{f.name}"
        for s in dataclasses.fields(Config)
        if dataclasses.is_dataclass(hints[s.name])
        for f in dataclasses.fields(hints[s.name])
    }, "a range for a key that does not exist"


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
