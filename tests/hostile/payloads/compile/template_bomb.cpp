// A compiler bomb: T<N, M> needs T<N-1, 2M> and T<N-1, 2M+1>, so T<26, 0> asks g++ for 2^26
// distinct instantiations. The compile stage's memory cap must end it, not the host.
template <int N, long M> struct T {
        static long f() { return T<N - 1, 2 * M>::f() + T<N - 1, 2 * M + 1>::f(); }
};
template <long M> struct T<0, M> {
        static long f() { return M; }
};
int main() { return (int)T<26, 0>::f(); }
