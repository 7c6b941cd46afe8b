package main

// A 128 MiB array with one element set: the binary holds all of it, twice the run's disk (512 MiB
// gave the same verdict, the payload and its control in 28 s against 7.5 s).
var big = [1 << 24]int64{1<<24 - 1: 1}

func main() { println(big[len(big)-1]) }
