//go:build !unix

package main

func ignoreTTIN() {}
