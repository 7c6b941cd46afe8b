package main

// A 512 MiB array with one element set: the binary holds all of it, far more than the run's
// disk.
var big = [1 << 26]int64{1<<26 - 1: 1}

func main() { println(big[len(big)-1]) }
