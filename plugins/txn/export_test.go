package txn

import "time"

// SetClock makes p read now instead of time.Now. It is for this package's
// tests alone: they move the coordinator's clock past a transaction's
// timeout instead of waiting for it.
func SetClock(p *Plugin, now func() time.Time) { p.now = now }
