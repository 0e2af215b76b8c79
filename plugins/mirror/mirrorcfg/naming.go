package mirrorcfg

import (
	"fmt"
	"strings"
)

// TopicPrefix is the mirror config that names a mirror's topics here:
// the topic the source calls T is prefix+T on the destination (with the
// source's topic ID, partitions, offsets and epochs as always). It is set
// when the mirror is created and never changes: the names of the topics
// a mirror made, its state keys and the group offsets it synced all
// depend on it. Unset (or empty), the names are the source's.
const TopicPrefix = "mirror.topic.prefix"

// maxPrefix leaves room for a source name in Kafka's 249 characters
// (and for ".diverged" after it).
const maxPrefix = 200

// Prefix is a mirror's topic prefix ("" for none).
func Prefix(c map[string]string) string { return c[TopicPrefix] }

// DestName is the name here of the source topic src of a mirror with
// configs c.
func DestName(c map[string]string, src string) string { return Prefix(c) + src }

// validPrefix checks mirror.topic.prefix: characters Kafka allows in a
// topic name, and short enough to leave room for a source name. A prefix
// that starts with "__" would make its topics look internal.
func validPrefix(v string, _ map[string]string) error {
	if len(v) > maxPrefix {
		return fmt.Errorf("at most %d characters", maxPrefix)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q is not allowed in a topic name (want [a-zA-Z0-9._-])", r)
		}
	}
	if strings.HasPrefix(v, "__") {
		return fmt.Errorf("a prefix starting with __ would name topics like internal ones")
	}
	return nil
}

// PrefixChange refuses a change of mirror.topic.prefix by an alter of a
// mirror's configs (from old to next): the prefix is set when the
// mirror is created.
func PrefixChange(old, next map[string]string) error {
	if Prefix(old) != Prefix(next) {
		return fmt.Errorf("mirror config %s is set when the mirror is created and cannot be changed (it is %q): create another mirror for another prefix", TopicPrefix, Prefix(old))
	}
	return nil
}
