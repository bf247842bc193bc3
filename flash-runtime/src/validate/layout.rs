//! Layout checks of one tensor: contiguity, u32 strides, 16-byte alignment, bounds
//! inside its device buffer and (for outputs) disjoint elements.

use crate::error::{FlashError, Result};
use crate::validate::TensorDesc;

/// Elements spanned by a tensor: `1 + sum((shape_i - 1) * stride_i)`, `None` on overflow.
fn extent(shape: [usize; 4], strides: [usize; 4]) -> Option<usize> {
    shape.iter().zip(strides).try_fold(1usize, |acc, (&n, s)| {
        acc.checked_add(n.checked_sub(1)?.checked_mul(s)?)
    })
}

/// True when no two elements of the (non-empty) tensor share memory.
fn non_overlapping(shape: [usize; 4], strides: [usize; 4]) -> bool {
    let mut dims: Vec<(usize, usize)> = (0..4)
        .filter(|&i| shape[i] > 1)
        .map(|i| (strides[i], shape[i]))
        .collect();
    dims.sort_unstable();
    let mut span = 0usize; // elements spanned by the dims seen so far, minus one
    for (stride, n) in dims {
        if stride <= span {
            return false;
        }
        let Some(s) = stride.checked_mul(n - 1).and_then(|x| x.checked_add(span)) else {
            return false;
        };
        span = s;
    }
    true
}

/// The strides the kernel is given: a dim of size 1 is never stepped over, so its stride
/// is irrelevant and set to 0 (as PyTorch allows any stride there).
pub(crate) fn effective_strides(t: &TensorDesc) -> [usize; 4] {
    std::array::from_fn(|i| {
        if t.shape[i] == 1 && i < 3 {
            0
        } else {
            t.strides[i]
        }
    })
}

/// The elements of a tensor that passed the layout checks, as contiguous runs: `(run_len,
/// starts)`, in elements from the start of its view, starts ascending. Dims that continue a
/// run (stride == run length so far) are merged into it, so a contiguous tensor is one run
/// and q sliced out of a packed `[b, s, 3, h, d]` buffer is `b * s` runs of `h * d`.
pub fn contiguous_runs(shape: [usize; 4], strides: [usize; 4]) -> (usize, Vec<usize>) {
    if shape.contains(&0) {
        return (0, Vec::new());
    }
    let mut dims: Vec<(usize, usize)> = (0..3)
        .filter(|&i| shape[i] > 1)
        .map(|i| (strides[i], shape[i]))
        .collect();
    dims.sort_unstable();
    let mut run = shape[3];
    let mut outer = dims.as_slice();
    while let Some((&(stride, n), rest)) = outer.split_first() {
        if stride != run {
            break;
        }
        run *= n;
        outer = rest;
    }
    let mut starts = vec![0usize];
    for &(stride, n) in outer {
        starts = (0..n)
            .flat_map(|i| starts.iter().map(move |s| s + i * stride))
            .collect();
    }
    starts.sort_unstable();
    (run, starts)
}

/// Layout checks of one non-empty tensor; returns its (row, head) strides as u32.
pub(crate) fn check_tensor(
    name: &'static str,
    t: &TensorDesc,
    need_disjoint: bool,
) -> Result<(u32, u32)> {
    let s = effective_strides(t);
    if s[3] != 1 {
        return Err(FlashError::StrideMismatch {
            tensor: name,
            why: format!(
                "the last dim (head_dim) must be contiguous (stride 1), got stride {}; \
                 make a contiguous copy of the tensor",
                s[3]
            ),
        });
    }
    let row = u32::try_from(s[1]);
    let head = u32::try_from(s[2]);
    let (Ok(row), Ok(head)) = (row, head) else {
        return Err(FlashError::StrideMismatch {
            tensor: name,
            why: format!(
                "row stride {} and head stride {} must each fit in u32 (at most {} elements)",
                s[1],
                s[2],
                u32::MAX
            ),
        });
    };
    for (dim, stride) in [("batch", s[0]), ("row", s[1]), ("head", s[2])] {
        if stride % 8 != 0 {
            return Err(FlashError::Misaligned {
                tensor: name,
                why: format!("its {dim} stride {stride} is not a multiple of 8 elements"),
            });
        }
    }
    if t.ptr % 16 != 0 {
        return Err(FlashError::Misaligned {
            tensor: name,
            why: format!("its base pointer {:#x} is not 16-byte aligned", t.ptr),
        });
    }
    match extent(t.shape, s) {
        Some(n) if n <= t.len => {}
        n => {
            let need = n.map_or("more than usize::MAX".to_string(), |n| n.to_string());
            return Err(FlashError::ShapeMismatch(format!(
                "`{name}` with shape {:?} and strides {:?} spans {need} elements but its device \
                 buffer holds {}",
                t.shape, s, t.len
            )));
        }
    }
    if need_disjoint && !non_overlapping(t.shape, s) {
        return Err(FlashError::StrideMismatch {
            tensor: name,
            why: format!(
                "strides {:?} for shape {:?} make two output elements share memory",
                s, t.shape
            ),
        });
    }
    Ok((row, head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extent_and_overlap() {
        assert_eq!(extent([2, 3, 4, 8], [96, 32, 8, 1]), Some(192));
        assert_eq!(extent([0, 3, 4, 8], [96, 32, 8, 1]), None);
        assert!(non_overlapping([2, 3, 4, 8], [96, 32, 8, 1]));
        assert!(non_overlapping([2, 3, 4, 8], [96, 8, 24, 1])); // heads outer of rows
        assert!(!non_overlapping([2, 3, 4, 8], [96, 32, 0, 1]));
        assert!(!non_overlapping([1, 3, 4, 16], [0, 64, 8, 1]));
        assert!(non_overlapping([1, 1, 1, 8], [0, 0, 0, 1]));
    }

    #[test]
    fn runs_merge_contiguous_dims() {
        assert_eq!(
            contiguous_runs([2, 3, 4, 8], [96, 32, 8, 1]),
            (192, vec![0])
        );
        assert_eq!(contiguous_runs([2, 0, 4, 8], [96, 32, 8, 1]), (0, vec![]));
        // packed qkv: [b, s, 3, h, d] with b = 2, s = 2, h = 2, d = 8
        let (run, starts) = contiguous_runs([2, 2, 2, 8], [96, 48, 8, 1]);
        assert_eq!((run, starts), (16, vec![0, 48, 96, 144]));
        // heads outer of rows, padded rows: one run per row
        let (run, starts) = contiguous_runs([1, 2, 3, 8], [0, 16, 40, 1]);
        assert_eq!((run, starts), (8, vec![0, 16, 40, 56, 80, 96]));
        // size-1 dims with odd strides are skipped
        assert_eq!(contiguous_runs([1, 1, 1, 8], [3, 5, 7, 1]), (8, vec![0]));
    }
}
