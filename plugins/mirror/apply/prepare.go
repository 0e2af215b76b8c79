package apply

import (
	"context"
	"fmt"
	"time"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// TruncateToLME is PREPARING's truncation of p (KIP-1279 "Log
// Convergence"): its log is cut at the start of the first epoch above
// lme, the source's last mirror epoch (everything, when the source never
// mirrored the partition: lme -1); epoch-based truncation during fetch
// then finishes the convergence. awaitISR, unless nil, waits until
// every ISR member truncated too (the KIP's MIRRORING); it is called
// without ApplyMu, so that the mirror's other partitions keep being
// copied. done says the partition may move to MIRRORING: false with no
// error when it left PREPARING meanwhile.
func (s Stage[P]) TruncateToLME(ctx context.Context, p P, lme int32, awaitISR func(context.Context) error) (done bool, err error) {
	s.ApplyMu.Lock()
	defer s.ApplyMu.Unlock()
	if s.Target.State(p) != mirrorstate.Preparing {
		return false, nil // stopped or paused meanwhile
	}
	ep, err := s.Target.Log(p)
	if err != nil {
		return false, err
	}
	to := int64(0)
	if lme >= 0 {
		if _, end := ep.EndOffsetForEpoch(lme); end >= 0 {
			to = end
		}
	}
	if to < ep.Offsets().LogEnd {
		tp, _ := p.Name()
		s.Log.Info("mirror LME truncation", "topic", tp.Topic, "partition", tp.Partition, "lme", lme, "offset", to)
		if err := s.Target.Truncate(p, ep, to, fmt.Sprintf("last mirror epoch %d", lme)); err != nil {
			return false, s.Target.Fail(p, fmt.Errorf("LME truncation to %d: %w", to, err))
		}
	}
	// Nothing appends to the partition while it is PREPARING.
	if awaitISR != nil {
		s.ApplyMu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, isrTruncationWait)
		err := awaitISR(ctx)
		cancel()
		s.ApplyMu.Lock()
		if err != nil {
			return false, fmt.Errorf("waiting for the ISR to truncate to the last mirror epoch: %w", err)
		}
		if s.Target.State(p) != mirrorstate.Preparing {
			return false, nil
		}
	}
	return true, nil
}

// isrTruncationWait bounds one wait for the ISR to truncate; PREPARING
// is retried after it (a silent follower leaves the ISR meanwhile).
const isrTruncationWait = 5 * time.Second
