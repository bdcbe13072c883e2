"""Build and run targets: host (CMake + shared library) today; boards and OpenCL later."""
