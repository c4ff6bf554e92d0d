"""The decoding cache: each row's K/V for every attention layer and the conv layers' last inputs, kept in fixed
row slots, so a row joining or leaving the decode batch copies that one row, not the whole batch.

The batch's B rows are slots 0..B-1, so a decode step runs over a view of them; `extend` writes new rows into the next
free slots, `remove` moves the last rows into the holes. Slots and positions grow by doubling. Rows sit at different
lengths: a mask over the padded capacity shows each row its own positions (sliding windows: masked, not dropped).

Left out: paging (a row's positions are contiguous), shrinking (the capacity stays at the longest row seen until
the engine starts a new cache), branches (a row is one sequence).
"""
import torch
import torch.nn.functional as F


def _grow(c, n, dim):
    """c zero-padded along dim (0: row slots, 2: positions) to hold n: to n or to twice its size, the larger."""
    if c.shape[dim] >= n:
        return c
    pad = list(c.shape)
    pad[dim] = max(n, 2 * c.shape[dim]) - c.shape[dim]
    return torch.cat([c, c.new_zeros(pad)], dim)


class Cache:
    """Per-row decoding state in slots: K/V per attention layer [slots, hkv, cap, D], conv state per conv layer
    [slots, L-1, H] (the last L-1 values of B*x). `lengths[b]`: tokens row b holds; rows are slots 0..B-1."""

    def __init__(self, model, batch_size: int, capacity: int = 256, causal=None):
        cfg, p = model.config, model.lm_head.weight
        self.causal = causal        # model.py's causal attention, for a fresh prefill (no import back up)
        self.B, self.slots, self.cap = batch_size, batch_size, max(1, capacity)
        self.lengths = torch.zeros(batch_size, dtype=torch.long)
        self.kv, self.state = {}, {}
        for i, lt in enumerate(cfg.layer_types):
            if lt == "conv":
                self.state[i] = p.new_zeros(batch_size, cfg.conv_L_cache - 1, cfg.hidden_size)
            else:
                shape = (batch_size, cfg.num_key_value_heads, self.cap, cfg.head_dim)
                self.kv[i] = (p.new_zeros(shape), p.new_zeros(shape))

    def extend(self, other: "Cache"):
        """Write `other`'s rows (e.g. a freshly prefilled request) into free slots after this batch's rows."""
        B, ob = self.B, other.B
        n = int(other.lengths.max()) if ob else 0
        if B + ob > self.slots:             # doubling: a full-buffer copy a handful of times per engine life
            self.slots = max(B + ob, 2 * self.slots)
            self.kv = {i: tuple(_grow(t, self.slots, 0) for t in kv) for i, kv in self.kv.items()}
            self.state = {i: _grow(s, self.slots, 0) for i, s in self.state.items()}
        for i, (kc, vc) in self.kv.items():
            kc, vc = self.kv[i] = (_grow(kc, n, 2), _grow(vc, n, 2))
            self.cap = max(self.cap, kc.shape[2])
            for t, o in ((kc, other.kv[i][0]), (vc, other.kv[i][1])):
                t[B:B + ob, :, :n] = o[:ob, :, :n]
                # a freed slot keeps its last row's values past n: masked, but a NaN there (a diverged adapter)
                # would still poison the softmax-times-V product, so the new row's tail starts at zero
                t[B:B + ob, :, n:] = 0
        for i, s in self.state.items():
            s[B:B + ob] = other.state[i][:ob]
        self.lengths = torch.cat([self.lengths, other.lengths[:ob]])
        self.B = B + ob

    def remove(self, rows):
        """Free these rows: the batch's last surviving rows move into the holes (one row copy each, whole rows so
        a slot's tail stays finite). Returns the new order: new row j was old row order[j]."""
        gone = set(rows)
        keep = [i for i in range(self.B) if i not in gone]
        nb = len(keep)
        holes, movers = [i for i in sorted(gone) if i < nb], [i for i in keep if i >= nb]
        order = list(range(nb))
        for h, m in zip(holes, movers):
            order[h] = m
        if holes:
            dst, src = torch.tensor(holes), torch.tensor(movers)
            for kv in self.kv.values():
                for t in kv:
                    t[dst.to(t.device)] = t[src.to(t.device)]
            for s in self.state.values():
                s[dst.to(s.device)] = s[src.to(s.device)]
        self.lengths = self.lengths[torch.tensor(order, dtype=torch.long)]
        self.B = nb
        return order

    def attend(self, layer, q, k, v, window, seg, B):
        N, h, D = q.shape
        T = N // B
        need = int(self.lengths.max()) + T
        kc, vc = self.kv[layer]
        if need > kc.shape[2]:      # (every decode step passes here: grow only when full)
            kc, vc = self.kv[layer] = (_grow(kc, need, 2), _grow(vc, need, 2))
            self.cap = max(self.cap, kc.shape[2])
        kb, vb = k.view(B, T, -1, D).transpose(1, 2), v.view(B, T, -1, D).transpose(1, 2)
        if T == 1:      # decode: every row's new K/V in one indexed write, not B small copies
            rows, pos = torch.arange(B, device=kc.device), self.lengths.to(kc.device)
            kc[rows, :, pos], vc[rows, :, pos] = kb[:, :, 0], vb[:, :, 0]
        else:
            for b in range(B):        # rows may sit at different lengths (continuous batching)
                s = int(self.lengths[b])
                kc[b, :, s:s + T], vc[b, :, s:s + T] = kb[b], vb[b]
        qb = q.view(B, T, h, D).transpose(1, 2)
        if int(self.lengths.max()) == 0:     # fresh prefill: no cached past, the packed path is exact
            o = self.causal(qb, kb, vb, window)
        else:
            qpos = (self.lengths.to(q.device)[:, None] + torch.arange(T, device=q.device))[:, None, :, None]
            kpos = torch.arange(need, device=q.device)[None, None, None, :]
            mask = kpos <= qpos
            if window is not None:
                mask = mask & (kpos > qpos - window)
            o = F.scaled_dot_product_attention(qb, kc[:B, :, :need], vc[:B, :, :need], attn_mask=mask,
                                               enable_gqa=h != kc.shape[1])
        return o.transpose(1, 2).reshape(N, h, D)

    def conv(self, layer, bx, weight, bias, B):
        N, H = bx.shape
        st = self.state[layer]
        x = torch.cat([st[:B], bx.view(B, N // B, H)], 1)    # [B, L-1+T, H]
        st[:B] = x[:, x.shape[1] - (weight.shape[-1] - 1):]
        y = F.conv1d(x.transpose(1, 2), weight, bias, groups=H)            # [B, H, T]
        return y.transpose(1, 2).reshape(N, H)
