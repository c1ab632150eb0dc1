//go:build (amd64 || arm64) && gc && !purego

package webhook

// prefetch asks the processor to bring the entrySlot at addr (24 bytes, on
// one cache line or two) into its caches, and returns at once. It is a
// hint: it reads nothing a program can see, and never faults, whatever addr
// is, mapped or not. Implemented in prefetch_$GOARCH.s.
func prefetch(addr uintptr)
