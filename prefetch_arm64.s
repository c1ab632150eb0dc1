//go:build gc && !purego

#include "textflag.h"

// func prefetch(addr uintptr)
TEXT ·prefetch(SB), NOSPLIT|NOFRAME, $0-8
	MOVD addr+0(FP), R0
	PRFM (R0), PLDL1KEEP   // the slot's first byte
	ADD  $23, R0
	PRFM (R0), PLDL1KEEP   // and its last, when the slot ends on the next line
	RET
