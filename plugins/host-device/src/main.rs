fn main() {
    libcni::skel::plugin_main(host_device::HostDevice, host_device::NAME)
}
