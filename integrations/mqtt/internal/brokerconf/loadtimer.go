package brokerconf

import (
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
)

// LoadTimer wraps a storage hook and times the calls in which it reads the
// stored state at start: its Init (AddHook calls it; kdb's hook reads the
// inflight messages and pending publishes there, mochi's pebble and bolt
// hooks open their database) and the Stored* events (in Serve): the hook's
// own part of a restart. The rest of Serve is the server's loading of
// what they return, the same code for every hook. Both commands wrap
// their hook in it and log the two parts when they listen.
type LoadTimer struct {
	mqtt.Hook
	took time.Duration
}

// Took returns the time spent in Init and the Stored* calls so far. AddHook
// and then Serve make them one after the other; read it after Serve
// returned.
func (t *LoadTimer) Took() time.Duration { return t.took }

func (t *LoadTimer) since(start time.Time) { t.took += time.Since(start) }

// Init is the wrapped hook's, timed.
func (t *LoadTimer) Init(config any) error {
	defer t.since(time.Now())
	return t.Hook.Init(config)
}

// StoredClients is the wrapped hook's, timed.
func (t *LoadTimer) StoredClients() ([]storage.Client, error) {
	defer t.since(time.Now())
	return t.Hook.StoredClients()
}

// StoredSubscriptions is the wrapped hook's, timed.
func (t *LoadTimer) StoredSubscriptions() ([]storage.Subscription, error) {
	defer t.since(time.Now())
	return t.Hook.StoredSubscriptions()
}

// StoredInflightMessages is the wrapped hook's, timed.
func (t *LoadTimer) StoredInflightMessages() ([]storage.Message, error) {
	defer t.since(time.Now())
	return t.Hook.StoredInflightMessages()
}

// StoredRetainedMessages is the wrapped hook's, timed.
func (t *LoadTimer) StoredRetainedMessages() ([]storage.Message, error) {
	defer t.since(time.Now())
	return t.Hook.StoredRetainedMessages()
}

// StoredSysInfo is the wrapped hook's, timed.
func (t *LoadTimer) StoredSysInfo() (storage.SystemInfo, error) {
	defer t.since(time.Now())
	return t.Hook.StoredSysInfo()
}
