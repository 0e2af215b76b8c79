package metadata

// Group configs (KIP-848, KIP-932): dynamic configs of the GROUP config
// resource (type 32), per group ID, such as consumer.session.timeout.ms
// or share.auto.offset.reset. They are ordinary Config records with the
// group resource type; validating names and values is the consumer-groups
// plugin's job.

// ConfigResourceGroup is Kafka's GROUP config resource type.
const ConfigResourceGroup ConfigResource = 32

// groupImage holds the group configs of an Image (embedded in Image); the
// map and its values are replaced, never modified.
type groupImage struct {
	// GroupConfigs are the dynamic configs of each group that has any.
	GroupConfigs map[string]map[string]string `json:"groupConfigs,omitempty"`
}

// setGroupConfig applies a Config record of the group resource.
func (b *builder) setGroupConfig(cr *ConfigRecord) {
	img := b.img
	img.GroupConfigs = cloneMap(img.GroupConfigs)
	if m := setConfig(img.GroupConfigs[cr.ResourceName], cr.Key, cr.Value); m != nil {
		img.GroupConfigs[cr.ResourceName] = m
	} else {
		delete(img.GroupConfigs, cr.ResourceName)
	}
	if len(img.GroupConfigs) == 0 {
		img.GroupConfigs = nil
	}
}
