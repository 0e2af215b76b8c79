package metadata

// The arguments of the metadata controller's decisions (raftmeta's
// Controller), here so that code asking for decisions (plugins through
// server/plugin.Metadata) names them without importing the raft quorum.

// TopicSpec describes a topic to create.
type TopicSpec struct {
	Name              string
	ID                UUID // zero = generate a random (v4) UUID
	Partitions        int32
	ReplicationFactor int16
	// Assignments optionally gives each partition's replicas; then
	// Partitions and ReplicationFactor may be <= 0 (Kafka's -1) or must
	// match it.
	Assignments [][]int32
	Configs     map[string]string
	Internal    bool
	// Source is a mirror topic's name on its source cluster when it is
	// not Name (AddMirrorTopics; "" means Name).
	Source string
}

// ConfigChange sets (Value non-nil) or deletes (Value nil) one dynamic
// config. Name is the topic name, the group ID, or for a broker ""
// (cluster default) or the broker's ID in decimal.
type ConfigChange struct {
	Resource ConfigResource
	Name     string
	Key      string
	Value    *string
}

// ScramChange upserts Credential, or deletes User's Mechanism if Delete.
type ScramChange struct {
	Credential ScramCredential
	Delete     bool
}
