"""Delayed per-tensor fp8 scaling (TE DelayedScaling), emulated: stale scales, saturation, checkpointed history."""

from __future__ import annotations

import pytest
import torch

from shared.config import ConfigError, load_config
from shared.config.precision import PrecisionConfig
from shared.model.transformer import MoETransformer
from shared.precision import gemm_recipe, lp_linear
from shared.precision.delayed import DelayedScalingState
from shared.precision.formats import E4M3, round_to_format


def _recipe(history_len=2, algo="max", margin=0):
    cfg = PrecisionConfig(
        expert="fp8", fp8_granularity="tensor", fp8_scaling="delayed",
        amax_history_len=history_len, amax_compute_algo=algo, fp8_margin=margin,
    )  # fmt: skip
    return gemm_recipe(cfg)


def _x_with_amax(amax, seed):
    x = (torch.rand(8, 16, generator=torch.Generator().manual_seed(seed)) * 1.8 - 0.9) * amax
    x[0, 0] = amax  # exactly this amax
    return x


def _q(x, scale):
    return round_to_format(x * scale, E4M3) / scale


@pytest.mark.parametrize(
    "algo,expected", [("max", [1.0, 448 / 3, 448 / 5, 448 / 5]), ("most_recent", [1.0, 448 / 3, 448 / 5, 448 / 1.5])]
)
def test_scale_at_step_t_comes_from_the_amax_of_earlier_steps(algo, expected):
    # amaxes 3, 5, 1.5, 7 with a 2-step history. Step 0 uses TE's initial scale 1; step 1 uses
    # 448/3; step 2 uses 448/max(5, 3) (max) or 448/5 (most recent); step 3 uses 448/max(1.5, 5)
    # (the 3 has rolled out) or 448/1.5. Never 448 / this step's own amax.
    recipe = _recipe(history_len=2, algo=algo)
    state = DelayedScalingState(1, recipe.delayed)
    w = torch.eye(16)  # exact in e4m3 at every scale used here, so y is the quantised x
    for step, (amax, scale) in enumerate(zip([3.0, 5.0, 1.5, 7.0], expected, strict=True)):
        x = _x_with_amax(amax, seed=step)
        y = lp_linear(x, w, recipe, state)
        used = state.scale[0, 0]
        assert used.item() == pytest.approx(scale, rel=1e-6), f"step {step}: scale used"
        torch.testing.assert_close(y, _q(x, used), rtol=0, atol=0)
        if step > 0:
            assert not torch.equal(y, _q(x, 448.0 / amax)), "a current scale would round differently"
        assert state.amax_history[0, 0, 0].item() == amax, "this step's amax enters the history after use"


def test_margin_divides_the_scale_by_two_to_the_margin():
    recipe = _recipe(history_len=4, margin=2)
    state = DelayedScalingState(1, recipe.delayed)
    for seed in range(2):
        lp_linear(_x_with_amax(2.0, seed), torch.eye(16), recipe, state)
    assert state.scale[0, 0].item() == 448.0 / 2.0 / 4


def test_a_sudden_spike_saturates_instead_of_overflowing():
    recipe = _recipe(history_len=4)
    state = DelayedScalingState(1, recipe.delayed)
    w = torch.eye(16)
    for seed in range(3):
        lp_linear(_x_with_amax(1.0, seed), w, recipe, state)
    spike = _x_with_amax(1.0, 7)
    spike[2, 3] = 1000.0  # far beyond what the stale scale 448/1 can represent
    y = lp_linear(spike, w, recipe, state)
    assert torch.isfinite(y).all()
    assert y[2, 3].item() == 1.0, "1000·448 clamps to e4m3's max 448, which dequantises to 448/448"
    y_next = lp_linear(_x_with_amax(1.0, 8), w, recipe, state)
    assert state.scale[0, 0].item() == pytest.approx(448.0 / 1000.0), "the spike's amax sets the next scale"
    assert torch.isfinite(y_next).all()


def test_gradients_use_their_own_delayed_scale_in_both_backward_gemms():
    recipe = _recipe(history_len=4)
    state = DelayedScalingState(1, recipe.delayed)
    x = _x_with_amax(1.0, 0).requires_grad_()
    w = (torch.randn(24, 16) / 4).requires_grad_()
    for step in range(3):
        x.grad = w.grad = None
        dy = torch.randn(8, 24) * 10 ** (-step)
        lp_linear(x, w, recipe, state).backward(dy)
        g_scale = state.scale[2, 0]
        assert state.amax_history[0, 2, 0].item() == dy.abs().max().item()
        dyq = _q(dy, g_scale)
        xq, wq = _q(x.detach(), state.scale[0, 0]), _q(w.detach(), state.scale[1, 0])
        torch.testing.assert_close(x.grad, dyq @ wq)
        torch.testing.assert_close(w.grad, dyq.t() @ xq)


def test_eval_forward_leaves_the_history_alone_and_recompute_reuses_the_forward_scale():
    recipe = _recipe(history_len=8)
    w = (torch.randn(24, 16) / 4).requires_grad_()
    plain, ckpt = DelayedScalingState(1, recipe.delayed), DelayedScalingState(1, recipe.delayed)
    for step in range(3):
        x = _x_with_amax(1.0 + step, step).requires_grad_()
        w.grad = None
        lp_linear(x, w, recipe, plain).sum().backward()
        ref = w.grad.clone()
        w.grad = None
        run = lambda t: lp_linear(t, w, recipe, ckpt)  # noqa: E731
        torch.utils.checkpoint.checkpoint(run, x, use_reentrant=False).sum().backward()
        torch.testing.assert_close(w.grad, ref, rtol=0, atol=0)
        assert torch.equal(plain.amax_history, ckpt.amax_history) and torch.equal(plain.scale, ckpt.scale)
    before = plain.amax_history.clone(), plain.scale.clone()
    with torch.no_grad():
        lp_linear(_x_with_amax(50.0, 9), w, recipe, plain)
    assert torch.equal(plain.amax_history, before[0]) and torch.equal(plain.scale, before[1])


def test_rows_pushed_since_the_last_reduction_are_counted_for_the_data_parallel_all_reduce(tmp_path):
    """Gradient accumulation pushes one row per micro-batch; the trainer's reduction must cover all
    of them (and no more: older rows already agree). Eval and recompute push nothing."""
    import torch.distributed as dist

    recipe = _recipe(history_len=4)
    state = DelayedScalingState(1, recipe.delayed)
    w = (torch.randn(24, 16) / 4).requires_grad_()
    for micro in range(3):
        lp_linear(_x_with_amax(1.0 + micro, micro).requires_grad_(), w, recipe, state).sum().backward()
    with torch.no_grad():
        lp_linear(_x_with_amax(9.0, 5), w, recipe, state)
    assert state.unreduced == 3
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        before = state.amax_history.clone()
        state.reduce_amax_()  # one rank: nothing to exchange, the count resets
        assert state.unreduced == 0 and torch.equal(state.amax_history, before)
    finally:
        dist.destroy_process_group()


def test_delayed_scaling_needs_per_tensor_granularity():
    with pytest.raises(ConfigError, match="fp8_scaling=delayed.*fp8_granularity=tensor"):
        load_config("configs/tiny.yaml", ["model.moe.precision.fp8_scaling=delayed"])


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread; two threads on a shared 2-core machine thrash."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


DELAYED = [
    "model.moe.precision.expert=fp8",
    "model.moe.precision.fp8_granularity=tensor",
    "model.moe.precision.fp8_scaling=delayed",
    "model.moe.precision.amax_history_len=16",
]


def _tiny(*overrides):
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *overrides])
    torch.manual_seed(0)
    return MoETransformer(cfg.model)


def _train(model, steps, seed=0, adam=False):
    """SGD (stateless, for resume checks) or Adam on a learnable stream: each token is a fixed
    function of the one before."""
    gen = torch.Generator().manual_seed(seed)
    params = model.parameters()
    opt = torch.optim.Adam(params, lr=1e-2) if adam else torch.optim.SGD(params, lr=0.5)
    losses = []
    for _ in range(steps):
        tokens = [torch.randint(0, 256, (4,), generator=gen)]
        for _ in range(32):
            tokens.append((tokens[-1] * 5 + 3) % 256)
        tokens = torch.stack(tokens, 1)
        opt.zero_grad()
        logits, aux = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        (loss + aux["aux_loss"]).backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_amax_history_round_trips_through_state_dict_and_resumes_identically(one_thread):
    model = _tiny(*DELAYED)
    _train(model, 3)
    sd = model.state_dict()
    gate_up = "layers.1.ffn.experts.gmm.delayed.128x64.amax_history"
    for key in (gate_up, "layers.1.ffn.experts.gmm.delayed.64x64.scale", "layers.1.ffn.shared.w1.delayed.amax_history"):
        assert key in sd, key
    assert sd[gate_up].shape == (16, 3, 8) and (sd[gate_up][:3] > 0).any() and (sd[gate_up][3:] == 0).all()
    assert {n for n, _ in model.named_parameters()} == {n for n, _ in _tiny().named_parameters()}
    resumed = _tiny(*DELAYED)
    resumed.load_state_dict(sd)
    assert _train(model, 2, seed=5) == _train(resumed, 2, seed=5)
    for (k, a), b in zip(model.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_delayed_fp8_trains_a_tiny_moe_close_to_current_scaling(one_thread):
    current = _train(_tiny(*DELAYED[:2]), 25, adam=True)
    model = _tiny(*DELAYED)
    assert all(layer.experts.gmm.recipe.delayed is not None for layer in model.moe_layers())
    delayed = _train(model, 25, adam=True)
    assert all(map(lambda v: v == v and abs(v) < float("inf"), delayed))
    assert delayed[-1] < delayed[0] - 0.8, "it learns"
    assert delayed != current, "stale scales round differently from current ones"
    assert abs(delayed[-1] - current[-1]) < 0.02 * current[-1], (delayed[-1], current[-1])
