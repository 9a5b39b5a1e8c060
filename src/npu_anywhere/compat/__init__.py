def install(): pass
def uninstall(): pass
