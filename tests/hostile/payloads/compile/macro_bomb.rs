// A compiler bomb: every expansion doubles its tokens, 2^n after n levels.
macro_rules! bomb {
    ($($t:tt)*) => { bomb!($($t)* $($t)*); };
}

fn main() {
    bomb!(x);
}
