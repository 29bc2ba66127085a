// Command prometheus-jmx-exporter-operator is a stand-in for the release's binary of that name in
// internal/release's test of a two-platform index: the same build, layers
// and index for a program that cross-compiles in seconds (the real one's
// first arm64 build compiles every dependency again: minutes on a cold
// machine, which make test cannot afford; make release builds it).
package main

func main() {}
