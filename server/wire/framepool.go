package wire

import (
	"math/bits"
	"sync"
)

// FramePool recycles the frame buffers of produce requests, whose records
// the engine copies before the handler returns: under produce load the
// broker would otherwise allocate, zero and collect every byte it receives.
// Buffers come in power-of-two classes from 64 KiB to 16 MiB; smaller
// frames are cheap to allocate, and larger ones rare enough that rounding
// them up to a power of two would waste more than pooling saves.
type FramePool struct{ classes [maxPooledFrame + 1]sync.Pool }

const (
	minPooledFrame = 16 // log2 of the smallest pooled buffer
	maxPooledFrame = 24 // log2 of the largest
)

// Get returns a buffer of length n, recycled when one of its class is free.
func (p *FramePool) Get(n int) []byte {
	c := bits.Len(uint(n - 1))
	if c < minPooledFrame || c >= len(p.classes) {
		return make([]byte, n)
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

// Put hands b back for a later Get of its class; b must not be used after.
func (p *FramePool) Put(b []byte) {
	c := bits.Len(uint(cap(b) - 1))
	if cap(b) != 1<<c || c < minPooledFrame || c >= len(p.classes) {
		return
	}
	b = b[:0]
	p.classes[c].Put(&b)
}
