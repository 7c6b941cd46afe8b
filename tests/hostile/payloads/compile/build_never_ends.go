package main

// A build that does not end in any useful time: constant folding builds a 512 MiB string
// constant (each line doubles the one before), which the compiler then has to write out.
const (
	s0  = "xxxxxxxxxxxxxxxx"
	s1  = s0 + s0
	s2  = s1 + s1
	s3  = s2 + s2
	s4  = s3 + s3
	s5  = s4 + s4
	s6  = s5 + s5
	s7  = s6 + s6
	s8  = s7 + s7
	s9  = s8 + s8
	s10 = s9 + s9
	s11 = s10 + s10
	s12 = s11 + s11
	s13 = s12 + s12
	s14 = s13 + s13
	s15 = s14 + s14
	s16 = s15 + s15
	s17 = s16 + s16
	s18 = s17 + s17
	s19 = s18 + s18
	s20 = s19 + s19
	s21 = s20 + s20
	s22 = s21 + s21
	s23 = s22 + s22
	s24 = s23 + s23
	s25 = s24 + s24
)

func main() { println(len(s25)) }
