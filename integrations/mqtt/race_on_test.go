//go:build race

package kdbmqtt_test

// raceBuild: under go test -race the brokers run as child processes are
// built with -race too, so the race detector watches the hook in them.
const raceBuild = true
