//! PTX IR layer: the builder's control flow: labels, branches, and the structured forms
//! kernels use (a warp-uniform `if`, `if`/`else` and loop), each one named after what it
//! means and documented with the PTX it emits.
//!
//! "Uniform" means every thread of a warp takes the branch the same way (`bra.uni`): the
//! predicate must be warp-uniform (derived from block indices, loop counters, or a
//! `vote.sync`), which the caller guarantees.

use super::Builder;
use crate::ptx::inst::{Inst, Stmt};
use crate::ptx::types::{Label, Pred, Reg};

/// A loop being emitted: the label of its top and of its exit (see
/// [`Builder::loop_start`]).
#[must_use = "a loop is closed with Builder::loop_end"]
#[derive(Debug, PartialEq, Eq)]
pub struct Loop {
    top: Label,
    done: Label,
    /// Whether every thread of a warp leaves at the same iteration (`bra.uni`).
    uni: bool,
}

impl Builder {
    /// A fresh label (place it with [`Builder::place`]).
    pub fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    /// Places label `l` here (the next instruction is its target).
    pub fn place(&mut self, l: Label) {
        self.body.push(Stmt::Label(l));
    }

    /// Unconditional branch; `uni` when every thread of the warp takes it together.
    pub fn bra(&mut self, target: Label, uni: bool) {
        self.push(Inst::Bra { target, uni });
    }

    /// Branch when `p` (or `!p`) holds.
    pub fn bra_if(&mut self, p: Reg<Pred>, negate: bool, target: Label, uni: bool) {
        self.when(p, negate, |b| b.bra(target, uni));
    }

    /// `ret`: the thread exits.
    pub fn ret(&mut self) {
        self.push(Inst::Ret);
    }

    /// Runs `body` only when the warp-uniform `p` holds; skips it otherwise:
    ///
    /// ```text
    ///     @!%p bra.uni L;
    ///     body
    /// L:
    /// ```
    pub fn if_uniform(&mut self, p: Reg<Pred>, body: impl FnOnce(&mut Self)) {
        self.skip_unless(p, true, body);
    }

    /// Runs `body` only when the warp-uniform `p` does not hold:
    ///
    /// ```text
    ///     @%p bra.uni L;
    ///     body
    /// L:
    /// ```
    pub fn unless_uniform(&mut self, p: Reg<Pred>, body: impl FnOnce(&mut Self)) {
        self.skip_unless(p, false, body);
    }

    /// Runs `body` only in the threads where `p` does not hold (`p` may differ between
    /// the threads of a warp: a plain, divergent branch):
    ///
    /// ```text
    ///     @%p bra L;
    ///     body
    /// L:
    /// ```
    pub fn unless(&mut self, p: Reg<Pred>, body: impl FnOnce(&mut Self)) {
        let skip = self.label();
        self.bra_if(p, false, skip, false);
        body(self);
        self.place(skip);
    }

    /// `body`, skipped by a uniform branch taken when `p` is `negate`d.
    fn skip_unless(&mut self, p: Reg<Pred>, negate: bool, body: impl FnOnce(&mut Self)) {
        let skip = self.label();
        self.bra_if(p, negate, skip, true);
        body(self);
        self.place(skip);
    }

    /// Runs `then` when the warp-uniform `p` holds and `otherwise` when it does not
    /// (labels allocated `ELSE` then `DONE`):
    ///
    /// ```text
    ///     @!%p bra.uni ELSE;
    ///     then
    ///     bra.uni DONE;
    /// ELSE:
    ///     otherwise
    /// DONE:
    /// ```
    pub fn if_else_uniform(
        &mut self,
        p: Reg<Pred>,
        then: impl FnOnce(&mut Self),
        otherwise: impl FnOnce(&mut Self),
    ) {
        let (other, done) = (self.label(), self.label());
        self.bra_if(p, true, other, true);
        then(self);
        self.bra(done, true);
        self.place(other);
        otherwise(self);
        self.place(done);
    }

    /// Opens a loop: allocates its `TOP` and `DONE` labels, in that order, and places
    /// `TOP` here. Exit with [`Builder::loop_exit_unless`], close with
    /// [`Builder::loop_end`].
    ///
    /// ```text
    /// TOP:
    /// ```
    pub fn loop_start(&mut self) -> Loop {
        self.open_loop(true)
    }

    /// [`Builder::loop_start`] for a loop the threads of a warp may leave at different
    /// iterations (its exit and back edge are plain `bra`).
    pub fn loop_start_divergent(&mut self) -> Loop {
        self.open_loop(false)
    }

    fn open_loop(&mut self, uni: bool) -> Loop {
        let lp = Loop {
            top: self.label(),
            done: self.label(),
            uni,
        };
        self.place(lp.top);
        lp
    }

    /// Leaves loop `lp` unless `p` holds (warp-uniform unless the loop is divergent):
    ///
    /// ```text
    ///     @!%p bra.uni DONE;      (divergent: bra)
    /// ```
    pub fn loop_exit_unless(&mut self, lp: &Loop, p: Reg<Pred>) {
        self.bra_if(p, true, lp.done, lp.uni);
    }

    /// Closes loop `lp`: jumps back to its top and places its exit here.
    ///
    /// ```text
    ///     bra.uni TOP;            (divergent: bra)
    /// DONE:
    /// ```
    pub fn loop_end(&mut self, lp: Loop) {
        self.bra(lp.top, lp.uni);
        self.place(lp.done);
    }

    /// A loop that runs `body` while the warp-uniform predicate `cond` computes holds
    /// (`cond` is emitted at the top of every iteration):
    ///
    /// ```text
    /// TOP:
    ///     cond -> %p
    ///     @!%p bra.uni DONE;
    ///     body
    ///     bra.uni TOP;
    /// DONE:
    /// ```
    pub fn while_uniform(
        &mut self,
        cond: impl FnOnce(&mut Self) -> Reg<Pred>,
        body: impl FnOnce(&mut Self),
    ) {
        let lp = self.loop_start();
        let p = cond(self);
        self.loop_exit_unless(&lp, p);
        body(self);
        self.loop_end(lp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::inst::Cmp;
    use crate::ptx::module::{LaunchBounds, Param};
    use crate::ptx::print;

    /// The statements `f` appends to a fresh builder (plus the final `ret`).
    fn body(f: impl FnOnce(&mut Builder)) -> Vec<Stmt> {
        let mut b = Builder::new();
        f(&mut b);
        b.finish("t", Vec::<Param>::new(), LaunchBounds::default())
            .body
    }

    /// The printed body lines of `f` (without the final `ret`).
    fn text(f: impl FnOnce(&mut Builder)) -> Vec<String> {
        let mut b = Builder::new();
        f(&mut b);
        let entry = b.finish("t", Vec::<Param>::new(), LaunchBounds::default());
        let mut s = String::new();
        print::write_entry(&mut s, &entry).unwrap();
        let lines: Vec<String> = s.lines().map(str::to_string).collect();
        let start = lines.iter().position(|l| l.contains("%tid.x")).unwrap();
        lines[start + 2..lines.len() - 2].to_vec()
    }

    /// A warp-uniform predicate and a marker instruction to put in bodies.
    fn pred(b: &mut Builder) -> Reg<Pred> {
        let t = b.special(crate::ptx::Special::TidX);
        b.setp_u32(Cmp::Lt, t, 32u32)
    }

    fn mark(b: &mut Builder, v: u32) {
        b.mov::<crate::ptx::B32>(v);
    }

    #[test]
    fn if_uniform_is_the_hand_built_skip() {
        let hand = body(|b| {
            let p = pred(b);
            let l = b.label();
            b.bra_if(p, true, l, true);
            mark(b, 1);
            b.place(l);
        });
        let helper = body(|b| {
            let p = pred(b);
            b.if_uniform(p, |b| mark(b, 1));
        });
        assert_eq!(helper, hand);
        let lines = text(|b| {
            let p = pred(b);
            b.if_uniform(p, |b| mark(b, 1));
        });
        assert_eq!(
            lines,
            ["    @!%p0 bra.uni L0;", "    mov.b32 %r1, 1;", "L0:"]
        );
    }

    #[test]
    fn unless_uniform_is_the_hand_built_skip() {
        let hand = body(|b| {
            let p = pred(b);
            let l = b.label();
            b.bra_if(p, false, l, true);
            mark(b, 1);
            b.place(l);
        });
        let helper = body(|b| {
            let p = pred(b);
            b.unless_uniform(p, |b| mark(b, 1));
        });
        assert_eq!(helper, hand);
        let lines = text(|b| {
            let p = pred(b);
            b.unless_uniform(p, |b| mark(b, 1));
        });
        assert_eq!(
            lines,
            ["    @%p0 bra.uni L0;", "    mov.b32 %r1, 1;", "L0:"]
        );
    }

    #[test]
    fn if_else_uniform_is_the_hand_built_pair() {
        let hand = body(|b| {
            let p = pred(b);
            let (edge, done) = (b.label(), b.label());
            b.bra_if(p, true, edge, true);
            mark(b, 1);
            b.bra(done, true);
            b.place(edge);
            mark(b, 2);
            b.place(done);
        });
        let helper = body(|b| {
            let p = pred(b);
            b.if_else_uniform(p, |b| mark(b, 1), |b| mark(b, 2));
        });
        assert_eq!(helper, hand);
        let lines = text(|b| {
            let p = pred(b);
            b.if_else_uniform(p, |b| mark(b, 1), |b| mark(b, 2));
        });
        let want = [
            "    @!%p0 bra.uni L0;",
            "    mov.b32 %r1, 1;",
            "    bra.uni L1;",
            "L0:",
            "    mov.b32 %r2, 2;",
            "L1:",
        ];
        assert_eq!(lines, want);
    }

    /// The hand-built loop kernels write today: top and done allocated in that order.
    fn hand_loop(b: &mut Builder) {
        let (top, done) = (b.label(), b.label());
        b.place(top);
        let p = pred(b);
        b.bra_if(p, true, done, true);
        mark(b, 1);
        b.bra(top, true);
        b.place(done);
    }

    #[test]
    fn loop_start_exit_end_is_the_hand_built_loop() {
        let helper = body(|b| {
            let lp = b.loop_start();
            let p = pred(b);
            b.loop_exit_unless(&lp, p);
            mark(b, 1);
            b.loop_end(lp);
        });
        assert_eq!(helper, body(hand_loop));
    }

    #[test]
    fn while_uniform_is_the_hand_built_loop() {
        let helper = body(|b| b.while_uniform(pred, |b| mark(b, 1)));
        assert_eq!(helper, body(hand_loop));
        let lines = text(|b| {
            let _ = pred(b);
            b.while_uniform(pred, |b| mark(b, 1));
        });
        let want = [
            "L0:",
            "    mov.u32 %r1, %tid.x;",
            "    setp.lt.u32 %p1, %r1, 32;",
            "    @!%p1 bra.uni L1;",
            "    mov.b32 %r2, 1;",
            "    bra.uni L0;",
            "L1:",
        ];
        assert_eq!(lines, want);
    }

    #[test]
    fn helpers_nest_and_leave_no_guard() {
        let helper = body(|b| {
            let p = pred(b);
            b.while_uniform(|_| p, |b| b.if_uniform(p, |b| mark(b, 1)));
            mark(b, 2);
        });
        let Stmt::Inst { guard, .. } = &helper[helper.len() - 2] else {
            panic!("the last mark is an instruction");
        };
        assert_eq!(*guard, None);
    }

    /// The divergent forms: plain `bra` where the uniform ones write `bra.uni`.
    #[test]
    fn divergent_forms_branch_without_uni() {
        let skip = text(|b| {
            let p = pred(b);
            b.unless(p, |b| mark(b, 1));
        });
        assert_eq!(skip, ["    @%p0 bra L0;", "    mov.b32 %r1, 1;", "L0:"]);
        let lp = text(|b| {
            let p = pred(b);
            let lp = b.loop_start_divergent();
            b.loop_exit_unless(&lp, p);
            b.loop_end(lp);
        });
        assert_eq!(lp, ["L0:", "    @!%p0 bra L1;", "    bra L0;", "L1:"]);
    }
}
