package main

// A 512 MiB array with one element set: the compiler writes all of it into its object file.
var big = [1 << 26]int64{1<<26 - 1: 1}

func main() { println(big[len(big)-1]) }
