//! Trains one pre-norm transformer block (attention + MLP, f32 weights, bf16 attention)
//! for `STEPS` steps (default 50) twice from the same initial weights and data: once with
//! flash-ptx's op (`flash_attn`, forward and backward), once with candle's own attention
//! (matmul, softmax in f32, matmul, as candle-transformers writes it). Prints both loss
//! curves side by side and the median step time of each.
//!
//! `cargo run --release --features gpu --example train_block` (env: STEPS, B, S, HEADS,
//! KV_HEADS, HEAD_DIM).

use std::time::Instant;

use candle_core::{D, DType, Device, Result, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use flash_ptx_candle::{FlashParams, flash_attn};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Deterministic normal values (xorshift + Box-Muller), so both runs start equal.
struct Rng(u64);
impl Rng {
    fn normal(&mut self, n: usize, std: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let mut u = || {
                    self.0 ^= self.0 << 13;
                    self.0 ^= self.0 >> 7;
                    self.0 ^= self.0 << 17;
                    ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
                };
                let (a, b) = (u(), u());
                ((-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()) as f32 * std
            })
            .collect()
    }
}

#[derive(Clone, Copy)]
struct Cfg {
    b: usize,
    s: usize,
    h: usize,
    hk: usize,
    d: usize,
}

impl Cfg {
    fn c(&self) -> usize {
        self.h * self.d
    }
}

struct Block {
    wq: Var,
    wkv: Var,
    wo: Var,
    w1: Var,
    w2: Var,
    n1: Var,
    n2: Var,
}

impl Block {
    fn new(cfg: Cfg, dev: &Device) -> Result<Self> {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let c = cfg.c();
        let kv = 2 * cfg.hk * cfg.d;
        let mut w = |rows: usize, cols: usize| -> Result<Var> {
            let std = (1.0 / rows as f32).sqrt();
            Var::from_tensor(&Tensor::from_vec(
                rng.normal(rows * cols, std),
                (rows, cols),
                dev,
            )?)
        };
        Ok(Block {
            wq: w(c, c)?,
            wkv: w(c, kv)?,
            wo: w(c, c)?,
            w1: w(c, 4 * c)?,
            w2: w(4 * c, c)?,
            n1: Var::from_tensor(&Tensor::ones(c, DType::F32, dev)?)?,
            n2: Var::from_tensor(&Tensor::ones(c, DType::F32, dev)?)?,
        })
    }

    fn vars(&self) -> Vec<Var> {
        [
            &self.wq, &self.wkv, &self.wo, &self.w1, &self.w2, &self.n1, &self.n2,
        ]
        .into_iter()
        .cloned()
        .collect()
    }

    fn forward(&self, x: &Tensor, cfg: Cfg, ours: bool) -> Result<Tensor> {
        let Cfg { b, s, h, hk, d } = cfg;
        let c = cfg.c();
        let x2 = x.reshape((b * s, c))?;
        let n = candle_nn::ops::rms_norm(&x2, self.n1.as_tensor(), 1e-5)?;
        let q = n.matmul(self.wq.as_tensor())?.reshape((b, s, h, d))?;
        let kv = n.matmul(self.wkv.as_tensor())?.reshape((b, s, 2 * hk, d))?;
        let (k, v) = (kv.narrow(2, 0, hk)?, kv.narrow(2, hk, hk)?);
        let bf = |t: &Tensor| t.to_dtype(DType::BF16);
        let (q, k, v) = (bf(&q)?, bf(&k)?, bf(&v)?);
        let a = match ours {
            true => flash_attn(&q, &k, &v, &FlashParams::causal())?,
            false => candle_attention(&q, &k, &v, h / hk)?,
        };
        let a = a.to_dtype(DType::F32)?.reshape((b * s, c))?;
        let x2 = (x2 + a.matmul(self.wo.as_tensor())?)?;
        let n = candle_nn::ops::rms_norm(&x2, self.n2.as_tensor(), 1e-5)?;
        let m = n
            .matmul(self.w1.as_tensor())?
            .gelu()?
            .matmul(self.w2.as_tensor())?;
        (x2 + m)?.reshape((b, s, c))
    }
}

/// Causal attention as candle models write it: bf16 matmuls, the softmax in f32.
fn candle_attention(q: &Tensor, k: &Tensor, v: &Tensor, group: usize) -> Result<Tensor> {
    let (b, s, h, d) = q.dims4()?;
    let hk = h / group;
    let rep = |t: &Tensor| -> Result<Tensor> {
        t.transpose(1, 2)?
            .unsqueeze(2)?
            .expand((b, hk, group, s, d))?
            .reshape((b, h, s, d))
    };
    let q = q.transpose(1, 2)?.contiguous()?;
    let (k, v) = (rep(k)?.contiguous()?, rep(v)?.contiguous()?);
    let scores = (q.matmul(&k.t()?)? * (1.0 / (d as f64).sqrt()))?.to_dtype(DType::F32)?;
    let mask: Vec<u8> = (0..s)
        .flat_map(|i| (0..s).map(move |j| u8::from(j <= i)))
        .collect();
    let mask = Tensor::from_vec(mask, (s, s), q.device())?.broadcast_as(scores.shape())?;
    let neg = Tensor::full(f32::NEG_INFINITY, scores.shape(), q.device())?;
    let p = candle_nn::ops::softmax(&mask.where_cond(&scores, &neg)?, D::Minus1)?;
    p.to_dtype(DType::BF16)?.matmul(&v)?.transpose(1, 2)
}

fn train(cfg: Cfg, steps: usize, ours: bool, dev: &Device) -> Result<(Vec<f32>, Vec<f64>)> {
    let block = Block::new(cfg, dev)?;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let n = cfg.b * cfg.s * cfg.c();
    let x = Tensor::from_vec(rng.normal(n, 1.0), (cfg.b, cfg.s, cfg.c()), dev)?;
    let y = Tensor::from_vec(rng.normal(n, 1.0), (cfg.b, cfg.s, cfg.c()), dev)?;
    let params = ParamsAdamW {
        lr: 1e-3,
        ..Default::default()
    };
    let mut opt = AdamW::new(block.vars(), params)?;
    let (mut losses, mut times) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        dev.synchronize()?;
        let t0 = Instant::now();
        let out = block.forward(&x, cfg, ours)?;
        let loss = (out - &y)?.sqr()?.mean_all()?;
        opt.backward_step(&loss)?;
        let l = loss.to_scalar::<f32>()?; // (synchronises)
        dev.synchronize()?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        losses.push(l);
    }
    Ok((losses, times))
}

fn median(mut x: Vec<f64>) -> f64 {
    x.sort_by(|a, b| a.total_cmp(b));
    x[x.len() / 2]
}

fn main() -> Result<()> {
    let dev = Device::new_cuda(0)?;
    let steps = env("STEPS", 50);
    let cfg = Cfg {
        b: env("B", 4),
        s: env("S", 2048),
        h: env("HEADS", 16),
        hk: env("KV_HEADS", 4),
        d: env("HEAD_DIM", 64),
    };
    println!(
        "one transformer block: batch {}, seq {}, {} query / {} kv heads, head dim {}, causal, \
         bf16 attention, f32 weights, AdamW lr 1e-3, {steps} steps",
        cfg.b, cfg.s, cfg.h, cfg.hk, cfg.d
    );
    let (ours, t_ours) = train(cfg, steps, true, &dev)?;
    let (theirs, t_theirs) = train(cfg, steps, false, &dev)?;
    println!("step  loss flash-ptx  loss candle  rel diff");
    let mut worst = 0f32;
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        let rel = (a - b).abs() / b.abs();
        worst = worst.max(rel);
        println!("{:4}  {a:14.6}  {b:11.6}  {rel:.2e}", i + 1);
    }
    let skip = steps.min(5);
    let (mo, mt) = (
        median(t_ours[skip..].to_vec()),
        median(t_theirs[skip..].to_vec()),
    );
    println!(
        "worst loss rel diff {worst:.2e}; median step time (steps {}..{steps}): flash-ptx \
         {mo:.2} ms, candle attention {mt:.2} ms ({:.2}x)",
        skip + 1,
        mt / mo
    );
    println!(
        "{{\"worst_rel_diff\": {worst}, \"step_ms_flash\": {mo}, \"step_ms_candle\": {mt}, \
         \"first_loss\": [{}, {}], \"last_loss\": [{}, {}]}}",
        ours[0],
        theirs[0],
        ours[steps - 1],
        theirs[steps - 1]
    );
    Ok(())
}
