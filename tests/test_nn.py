"""torchcut.nn: the cut heads and the scribble loss."""

import pytest
import torch

import torchcut
from torchcut.diff import contrast_weights, cut_mask
from torchcut.nn import CutHead, RefineHead, ScribbleCutLoss


def test_cut_head_parameters_modes_and_gradients():
    torch.manual_seed(0)
    head = CutHead(lam=0.7, pairwise="contrast", sigma=0.4, estimator="perturbed", samples=6)
    assert [n for n, _ in head.named_parameters()] == ["pair.log_lam"]
    assert head.lam.item() == pytest.approx(0.7)
    image = torch.rand(2, 3, 8, 9)
    logits = torch.randn(2, 1, 8, 9, requires_grad=True)
    head.train()
    soft = head(logits, image)
    assert soft.shape == (2, 8, 9)
    assert ((soft * 6).round() == soft * 6).all() and ((soft > 0) & (soft < 1)).any()  # means of 6 masks
    soft.sum().backward()
    assert head.pair.log_lam.grad is not None and logits.grad is not None
    head.eval()
    hard = head(logits, image)
    want = cut_mask(logits.detach()[:, 0], 0.7 * contrast_weights(image, 4, 0.4))
    assert torch.equal(hard.detach(), want.detach())
    fixed = CutHead(lam=2.0, pairwise="uniform", learn_lam=False)
    assert list(fixed.parameters()) == [] and [n for n, _ in fixed.named_buffers()] == ["pair.log_lam"]


def test_cut_head_learned_pairwise_trains_its_convolution():
    torch.manual_seed(1)
    head = CutHead(lam=1.0, pairwise="learned", in_channels=4, connectivity=8)
    names = sorted(n for n, _ in head.named_parameters())
    assert names == ["pair.edge_net.bias", "pair.edge_net.weight", "pair.log_lam"]
    assert head.pair.edge_net.out_channels == 4  # K = 4 offsets for 8-connectivity
    feats = torch.randn(1, 4, 6, 6)
    logits = torch.randn(1, 6, 6) * 0.3
    target = torch.zeros(1, 6, 6)
    target[:, :, :3] = 1
    mask = head(logits, feats)
    (mask - target).abs().sum().backward()
    assert head.pair.edge_net.weight.grad is not None and torch.isfinite(head.pair.edge_net.weight.grad).all()


def test_heads_reject_bad_arguments():
    with pytest.raises(ValueError, match="pairwise: expected one of .*got 'crf'"):
        CutHead(pairwise="crf")
    with pytest.raises(ValueError, match="in_channels: expected a positive int for pairwise='learned', got None"):
        CutHead(pairwise="learned")
    with pytest.raises(ValueError, match="lam: expected a positive finite number, got 0"):
        RefineHead(lam=0)
    with pytest.raises(ValueError, match="estimator: expected one of"):
        RefineHead(estimator="ste")
    with pytest.raises(ValueError, match=r"image: expected a \[B, C, H, W\] tensor for pairwise='contrast', got None"):
        CutHead()(torch.zeros(1, 1, 3, 3))
    with pytest.raises(ValueError, match=r"logits: expected shape \[B, 1, H, W\] or \[B, H, W\], got \(1, 2, 3, 3\)"):
        CutHead(pairwise="uniform")(torch.zeros(1, 2, 3, 3))


def test_refine_head_matches_expansion():
    torch.manual_seed(2)
    head = RefineHead(lam=0.6, pairwise="contrast", sigma=0.3).eval()
    logits = torch.randn(2, 3, 7, 8, requires_grad=True)
    image = torch.rand(2, 1, 7, 8)
    y = head(logits, image)
    w = 0.6 * contrast_weights(image, 4, 0.3)
    want = torchcut.expansion(
        -torch.log_softmax(logits.detach(), 1).double(), 1 - torch.eye(3, dtype=torch.float64), weights=w.double()
    )
    assert torch.equal(y.argmax(1), want)
    head.train()
    y = head(logits, image)
    (y[:, 0]).sum().backward()
    assert logits.grad is not None and head.pair.log_lam.grad is not None


def _best(scores, w, offsets, allowed):
    """max over masks allowed by the scribbles of sum s x - sum w [x_p != x_q] (tiny grids)."""
    H, W = scores.shape
    nodes = [(i, j) for i in range(H) for j in range(W)]
    vals = []
    for bits in range(1 << len(nodes)):
        x = {p: bool(bits >> n & 1) for n, p in enumerate(nodes)}
        if not allowed(x):
            continue
        v = sum(float(scores[p]) for p in nodes if x[p])
        for p in nodes:
            for k, o in enumerate(offsets):
                q = (p[0] + o[0], p[1] + o[1])
                if 0 <= q[0] < H and 0 <= q[1] < W and x[p] != x[q]:
                    v -= float(w[k][p])
        vals.append((v, bits))
    vals.sort(reverse=True)
    assert len(vals) == 1 or vals[0][0] - vals[1][0] > 1e-6
    return vals[0][0], torch.tensor([bool(vals[0][1] >> n & 1) for n in range(len(nodes))]).view(H, W)


@pytest.mark.parametrize("connectivity", [4, 8])
def test_scribble_loss_matches_enumeration(connectivity):
    gen = torch.Generator().manual_seed(connectivity)
    offsets = torchcut.grid_offsets(2, connectivity)
    B, H, W = 2, 2, 4
    scores = torch.randn(B, H, W, generator=gen, dtype=torch.float64).requires_grad_()
    w = (0.5 * torch.rand(B, len(offsets), H, W, generator=gen, dtype=torch.float64)).requires_grad_()
    scribbles = torch.zeros(B, H, W, dtype=torch.int64)
    scribbles[:, 0, 0] = 1
    scribbles[:, 1, 3] = 2
    scribbles[1, 1, 1] = 2
    loss = ScribbleCutLoss(connectivity, reduction="none")(scores, scribbles, w)
    loss.sum().backward()
    for b in range(B):
        free, x = _best(scores[b].detach(), w[b].detach(), offsets, lambda m: True)
        sc = scribbles[b]
        held, xc = _best(
            scores[b].detach(),
            w[b].detach(),
            offsets,
            lambda m: all(m[p] == (int(sc[p]) == 1) for p in m if int(sc[p]) > 0),
        )
        assert loss[b].item() == pytest.approx(free - held, abs=1e-6)
        assert free - held >= 0
        want = x.double() - xc.double()
        torch.testing.assert_close(scores.grad[b], want * (scores[b].detach() != 0))


def test_scribble_loss_weights_gradient_is_the_difference_of_the_cut_edges():
    scores = torch.tensor([[[1.0, 0.5, -0.5, -1.0]]], dtype=torch.float64)
    w = torch.full((2, 1, 4), 0.2, dtype=torch.float64, requires_grad=True)
    ScribbleCutLoss()(scores, torch.tensor([[[1, 0, 1, 2]]]), w).backward()
    # free cut between pixels 1 and 2, held cut between 2 and 3: loss = held - free cut capacity
    assert w.grad[0].tolist() == [[0.0, -1.0, 1.0, 0.0]]
    assert w.grad[1].abs().sum().item() == 0.0


def test_scribble_loss_zero_when_the_cut_agrees_and_reductions():
    scores = torch.tensor([[[2.0, 1.0, -1.0, -2.0]]], requires_grad=True)
    scribbles = torch.tensor([[[1, 0, 0, 2]]])
    loss = ScribbleCutLoss()(scores, scribbles, 0.3)
    assert loss.item() == 0.0
    loss.backward()
    assert scores.grad.abs().sum().item() == 0.0
    two = torch.cat([scores.detach(), -scores.detach()])
    per = ScribbleCutLoss(reduction="none")(two, torch.cat([scribbles, scribbles]), 0.3)
    assert per[0].item() == 0.0 and per[1].item() > 0
    assert ScribbleCutLoss(reduction="sum")(two, torch.cat([scribbles, scribbles]), 0.3).item() == pytest.approx(
        per.sum().item()
    )
    with pytest.raises(ValueError, match="scribbles: expected 0 .*got 3"):
        ScribbleCutLoss()(scores, torch.tensor([[[3, 0, 0, 0]]]), 0.3)
    with pytest.raises(ValueError, match="weights: expected non-negative edge weights"):
        ScribbleCutLoss()(scores, scribbles, -0.3)


@pytest.mark.cuda
def test_heads_and_loss_cuda():
    torch.manual_seed(3)
    head = CutHead(lam=0.5, pairwise="contrast", sigma=0.4).cuda()
    image = torch.rand(2, 3, 16, 16, device="cuda")
    logits = torch.randn(2, 1, 16, 16, device="cuda", requires_grad=True)
    m = head(logits, image)
    assert m.device.type == "cuda"
    m.sum().backward()
    cpu = CutHead(lam=0.5, pairwise="contrast", sigma=0.4)
    assert torch.equal(cpu(logits.detach().cpu(), image.cpu()), m.detach().cpu())
    scribbles = torch.zeros(2, 16, 16, dtype=torch.int64, device="cuda")
    scribbles[:, 0, 0] = 1
    scribbles[:, -1, -1] = 2
    loss = ScribbleCutLoss()(logits[:, 0], scribbles, 0.3)
    ref = ScribbleCutLoss()(logits.detach()[:, 0].cpu(), scribbles.cpu(), 0.3)
    assert loss.item() == pytest.approx(ref.item(), abs=1e-5)


@pytest.mark.slow
def test_head_and_loss_under_torch_compile():
    torch.manual_seed(0)
    head = CutHead(lam=0.5, pairwise="contrast", sigma=0.4)
    loss_fn = ScribbleCutLoss()
    img = torch.rand(2, 1, 12, 12)
    logits = torch.randn(2, 1, 12, 12)
    scribbles = torch.zeros(2, 12, 12, dtype=torch.int64)
    scribbles[:, 0, 0] = 1
    scribbles[:, -1, -1] = 2

    def f(lg):
        return head(lg, img).sum() + loss_fn(lg, scribbles, 0.3)

    res = []
    for fn in (f, torch.compile(f)):
        x = logits.clone().requires_grad_()
        head.zero_grad()
        out = fn(x)
        out.backward()
        res.append((out.detach(), x.grad.clone(), head.pair.log_lam.grad.clone()))
    for a, b in zip(*res):
        torch.testing.assert_close(a, b)
