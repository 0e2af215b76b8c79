package metadata

import (
	"context"
	"fmt"
	"sync"
)

// ProducerIDBlock is how many producer ids a ProducerIDs takes from the
// controller at a time (Kafka's ProducerIdsRecord blocks are 1000).
const ProducerIDBlock = 1000

// ProducerIDs hands out producer ids from blocks the controller
// allocates (AllocateProducerIDs), so that one id in a thousand costs a
// metadata write. An id is never handed out twice, across restarts and
// brokers; ids left in a block when the process stops are never used.
// The zero value is ready; it is safe for concurrent use.
type ProducerIDs struct {
	mu        sync.Mutex
	next, end int64 // [next, end) are still free
}

// Next returns a producer id, allocating a block from c (the Controller)
// when the current one is used up.
func (p *ProducerIDs) Next(ctx context.Context, c interface {
	AllocateProducerIDs(ctx context.Context, count int64) (int64, error)
}) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next >= p.end {
		first, err := c.AllocateProducerIDs(ctx, ProducerIDBlock)
		if err != nil {
			return -1, fmt.Errorf("allocate producer ids: %w", err)
		}
		p.next, p.end = first, first+ProducerIDBlock
	}
	id := p.next
	p.next++
	return id, nil
}
