package main

//go:generate bash generate.sh
