package plugin

import (
	"errors"
	"fmt"
	"strconv"
)

// Props reads a plugin's keys from the broker properties
// (server.Config.Props), with defaults, and collects an error for every
// bad value so that one message names them all.
type Props struct {
	m    map[string]string
	errs []error
}

// ReadProps returns a reader of m.
func ReadProps(m map[string]string) *Props { return &Props{m: m} }

// Int is key's value, def when it is unset. A value that is not an
// integer from min to max is an error, and Int returns def for it.
func (p *Props) Int(key string, def, min, max int64) int64 {
	s, ok := p.m[key]
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < min || n > max {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: want an integer from %d to %d", key, s, min, max))
		return def
	}
	return n
}

// Err is every error of the values read so far, nil if there was none.
func (p *Props) Err() error { return errors.Join(p.errs...) }
