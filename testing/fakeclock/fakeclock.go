// Package fakeclock is a clock that tests move by hand, for the code that
// takes its clock as a func() time.Time (engine.Config.Now,
// replication.Config.Now, coord.Config.Now): a deadline in the code under
// test passes when the test advances the clock past it, with no sleep and
// no race against the scheduler.
//
// Like testing/wait it imports only the standard library, so that the
// in-package tests of any package can use it without an import cycle.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a fake clock, safe for concurrent use: the code under test
// reads it from its own goroutines while the test moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock standing at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time; pass the method value as a Config's Now.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
