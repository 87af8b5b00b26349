//go:build !race

package kdbmqtt_test

const raceBuild = false
