//go:build gc && !purego

#include "textflag.h"

// func prefetch(addr uintptr)
TEXT ·prefetch(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ addr+0(FP), AX
	PREFETCHT0 (AX)   // the slot's first byte
	PREFETCHT0 23(AX) // and its last, when the slot ends on the next line
	RET
