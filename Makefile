# Thin wrapper around ./dev, which also installs the Debian packages tenure needs.
.PHONY: setup demo test bench lint
setup:
	./dev setup
demo:
	./dev demo
test:
	./dev test
bench:
	./dev bench
lint:
	./dev lint
