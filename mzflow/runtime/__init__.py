"""runtime/"""
