package cli

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// InWords rewrites the message of err, as Exit prints it, into what an
// operator reads: a failed dial as "cannot reach HOST:PORT: connection
// refused" rather than the client library's chain, a request split over
// brokers (kadm's shard errors) as what each broker answered, and no
// part said twice in a row.
func InWords(msg string, err error) string {
	var se *kadm.ShardErrors
	if errors.As(err, &se) {
		msg = strings.Replace(msg, se.Error(), shardWords(se), 1)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		addr := ""
		var dns *net.DNSError
		switch {
		case op.Addr != nil:
			addr = op.Addr.String()
		case errors.As(op, &dns):
			addr = dns.Name
		}
		words := fmt.Sprintf("cannot reach %s: %s", addr, DialCause(op))
		if i := strings.Index(msg, "unable to dial: "+op.Error()); i >= 0 {
			msg = msg[:i] + words + msg[i+len("unable to dial: "+op.Error()):]
		} else {
			msg = strings.Replace(msg, op.Error(), words, 1)
		}
	}
	return dedupe(msg)
}

// shardWords says what each broker answered to a request kadm split.
func shardWords(se *kadm.ShardErrors) string {
	var parts []string
	for _, e := range se.Errs {
		p := e.Err.Error()
		if e.Broker.NodeID >= 0 && e.Broker.Host != "" {
			p = fmt.Sprintf("broker %d (%s): %s", e.Broker.NodeID, net.JoinHostPort(e.Broker.Host, fmt.Sprint(e.Broker.Port)), p)
		}
		if !strings.Contains(strings.Join(parts, "; "), p) {
			parts = append(parts, p)
		}
	}
	return se.Name + ": " + strings.Join(parts, "; ")
}

// dedupe drops a ": "-separated part equal to the part before it, and a
// part that only repeats the end of the one before ("NAME: The
// description.: The description.").
func dedupe(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:1]
	for _, p := range parts[1:] {
		prev := out[len(out)-1]
		if strings.EqualFold(p, prev) || len(p) > 8 && strings.HasSuffix(prev, p) {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}

// KafkaError is a Kafka error code's error with the broker's message: the
// error name once, then the broker's words, else the code's description
// ("TOPIC_ALREADY_EXISTS: Topic 'orders' already exists."). It is nil
// for a nil err.
func KafkaError(err error, message string) error {
	var ke *kerr.Error
	message = strings.TrimSpace(message)
	if err == nil || !errors.As(err, &ke) || message == "" || strings.Contains(err.Error(), message) {
		return err
	}
	message = strings.TrimPrefix(message, ke.Message+": ")
	return &brokerError{code: ke, message: message}
}

// brokerError is a Kafka error with the message the broker gave for it;
// errors.Is matches the code.
type brokerError struct {
	code    *kerr.Error
	message string
}

func (e *brokerError) Error() string { return e.code.Message + ": " + e.message }
func (e *brokerError) Unwrap() error { return e.code }
