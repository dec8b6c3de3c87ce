# `sam build` (BuildMethod: makefile) runs build-<LogicalId> with ARTIFACTS_DIR set.
# Only the function code goes into the package: engine/, functions/, workflows/ and
# the packages of requirements.txt, installed for the Lambda platform, never .venv/ or tests/.
PYTHON ?= python3.12
PLATFORM ?= manylinux2014_aarch64
# Your own workflow packages go here too; a chaos deployment adds chaos (for chaos.workflows):
#   SOURCES='engine functions workflows chaos' sam build
# `loom up` reads this same variable (from the environment, else this default line) and runs
# its local functions from the same package: keep the default on one line.
SOURCES ?= engine functions workflows

build-WorkerFunction build-SweeperFunction build-ControlPlaneFunction:
	mkdir -p "$(ARTIFACTS_DIR)"
	cp -R $(SOURCES) "$(ARTIFACTS_DIR)/"
	find "$(ARTIFACTS_DIR)" -name __pycache__ -type d -prune -exec rm -rf {} +
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r requirements.txt \
		--target "$(ARTIFACTS_DIR)" --platform $(PLATFORM) --implementation cp \
		--python-version 3.12 --only-binary=:all: --upgrade

.PHONY: build-WorkerFunction build-SweeperFunction build-ControlPlaneFunction
