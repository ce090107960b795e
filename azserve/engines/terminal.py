"""Play a checkpoint in the terminal: the board after each move, the human's moves typed in."""

from __future__ import annotations

import argparse

from azserve.arena.agent import agent_from_checkpoint


def run_play(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)  # one position at a time: more threads only add overhead
    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, args.game)
    game = agent.game
    sims = cfg.eval.sims if args.sims is None else args.sims
    human = 0 if args.first == "human" else 1
    state = game.initial_state()
    print(
        f"{cfg.game}: you are {'first' if human == 0 else 'second'}; moves are zero-based "
        f"({'cells 0-8, row-major' if cfg.game == 'tictactoe' else 'columns 0-6, left to right'}); q quits."
    )
    while not game.is_terminal(state):
        print("\n" + game.render(state))
        if game.to_play(state) == human:
            legal = game.legal_actions(state)
            try:
                text = input(f"your move {[game.format_move(a) for a in legal]}: ").strip()
            except EOFError:  # stdin closed: quit like "q"
                print()
                return 0
            if text in ("q", "quit", "exit"):
                return 0
            try:
                action = game.parse_move(text)
                state = game.apply(state, action)
            except ValueError as exc:
                print(f"  {exc}")
            continue
        (a,) = agent.analyze_sync([state], sims)
        top = sorted(range(len(a.policy)), key=lambda i: -a.policy[i])[:3]
        print(
            f"agent plays {game.format_move(a.move)}  (value for agent {a.value:+.2f}; "
            f"prior {', '.join(f'{game.format_move(i)}:{a.policy[i]:.2f}' for i in top)})"
        )
        state = game.apply(state, a.move)
    print("\n" + game.render(state))
    tv = game.terminal_value(state)
    if tv == 0:
        print("draw")
    else:
        winner = game.to_play(state) if tv > 0 else 1 - game.to_play(state)
        print("you win" if winner == human else "the agent wins")
    return 0
